-- The link took these firing entries: each becomes delivered (final).
-- ARGV: now, id...   Returns how many.
local now = tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local k = ekey(id)
  local h = header(k)
  if h then
    local e = parse(h)
    if e.state == FIRING then
      redis.call('ZREM', B .. ':lease', id)
      finish(k, id, h, e, DELIVERED, now)
      n = n + 1
    end
  end
end
return n
