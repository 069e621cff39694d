-- The link took these firing entries: each becomes delivered (final).
-- ARGV: now, id...   Returns how many.
--
-- One MGET reads the entries; their final headers (the body dropped) and
-- sorted-set changes are gathered and made at `flush`, with one MSET and
-- one variadic call per set (`changes`): no redis.call per entry (the
-- variadic calls go in slices: `bulk`, `bulk_read`).
local now = tonumber(ARGV[1])
if #ARGV < 2 then
  return 0
end
local lease = B .. ':lease'
local keys = {}
for i = 2, #ARGV do
  keys[i - 1] = ekey(ARGV[i])
end
local values = bulk_read('MGET', nil, keys)
local c = changes()
local n = 0
for i = 1, #keys do
  local v = values[i]
  if v then
    local h = header_of(v)
    local e = parse(h)
    if e.state == FIRING then
      local id = ARGV[i + 1]
      later_rem(c, lease, id)
      finish_later(c, keys[i], id, h, e, DELIVERED, now, ARGV[1])
      n = n + 1
    end
  end
end
flush(c)
return n
