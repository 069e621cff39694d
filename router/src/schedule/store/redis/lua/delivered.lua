-- The link took these firing entries: each becomes delivered (final).
-- ARGV: now, id...   Returns how many.
--
-- Per entry: one GETRANGE (the header) and one SET; the sorted-set changes
-- are gathered and made with one variadic call per set (`changes`).
local now = tonumber(ARGV[1])
local lease = B .. ':lease'
local c = changes()
local n = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local k = ekey(id)
  local h = header(k)
  if h then
    local e = parse(h)
    if e.state == FIRING then
      later_rem(c, lease, id)
      finish_later(c, k, id, h, e, DELIVERED, now, ARGV[1])
      n = n + 1
    end
  end
end
flush(c)
return n
