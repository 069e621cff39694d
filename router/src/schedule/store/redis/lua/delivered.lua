-- The link took these firing entries: each becomes delivered (final).
-- ARGV: now, id...   Returns how many.
--
-- One MGET reads the entries and one MSET writes their final headers (the
-- body dropped); the sorted-set changes are gathered and made with one
-- variadic call per set (`changes`): no redis.call per entry (the
-- variadic calls go in slices: `bulk`, `bulk_read`).
local now = tonumber(ARGV[1])
if #ARGV < 2 then
  return 0
end
local lease, fin = B .. ':lease', B .. ':fin'
local keys = {}
for i = 2, #ARGV do
  keys[i - 1] = ekey(ARGV[i])
end
local values = bulk_read('MGET', nil, keys)
local c = changes()
local finals = {}
local n = 0
for i = 1, #keys do
  local v = values[i]
  if v then
    local h = string.sub(v, 1, (struct.unpack('>H', v, 39)))
    local e = parse(h)
    if e.state == FIRING then
      local id = ARGV[i + 1]
      later_rem(c, lease, id)
      relist_later(c, id, e, DELIVERED)
      later_add(c, fin, ARGV[1], id)
      finals[#finals + 1] = keys[i]
      finals[#finals + 1] = with_state(h, DELIVERED, e.attempts, now, 0)
      n = n + 1
    end
  end
end
bulk('MSET', nil, finals)
flush(c)
return n
