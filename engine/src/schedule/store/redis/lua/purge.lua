-- Remove final entries (dead letters too) that entered their state before
-- `before`, with their attempt logs.
-- ARGV: before (exclusive), limit   Returns how many were removed.
local fin = B .. ':fin'
local ids = redis.call('ZRANGE', fin, '-inf', '(' .. ARGV[1], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
local c = changes()
local gone = {}
for _, id in ipairs(ids) do
  later_rem(c, fin, id)
  local k = ekey(id)
  local h = header(k)
  if h then
    local e = parse(h)
    if FINAL[e.state] then
      later_rem(c, lkey(e.state, e.topic), e.due .. id)
      if e.topic then
        later_rem(c, lkey(e.state, nil), e.due .. id)
      end
      gone[#gone + 1] = k
      gone[#gone + 1] = B .. ':a:' .. id
    end
  end
end
flush(c)
for i = 1, #gone, 1000 do
  redis.call('DEL', unpack(gone, i, math.min(i + 999, #gone)))
end
return #gone / 2
