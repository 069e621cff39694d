-- Remove final statuses that entered their state before `before`.
-- ARGV: before (exclusive), limit   Returns how many were removed.
local fin = B .. ':fin'
local ids = redis.call('ZRANGE', fin, '-inf', '(' .. ARGV[1], 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
local n = 0
for _, id in ipairs(ids) do
  redis.call('ZREM', fin, id)
  local k = ekey(id)
  local h = header(k)
  if h then
    local e = parse(h)
    if e.state >= DELIVERED then
      redis.call('ZREM', lkey(e.state, e.topic), e.due .. id)
      redis.call('DEL', k)
      n = n + 1
    end
  end
end
return n
