-- Firing entries end: each becomes delivered, declined or dead (final),
-- its step cleared, its attempt logged. A dead letter keeps its record (to
-- be replayed); the others keep their header only.
-- ARGV: now, max, keep, then per entry: id, state code, record ('' for
-- none) (max and keep bound the attempt log: `log_attempt`).
-- Returns { moved, trimmed }: how many ended, how many log records the
-- bound dropped.
--
-- As delivered.lua: one MGET reads the entries, and the new values and
-- sorted-set changes are made at `flush`, a few calls for the batch; the
-- attempt logs take a call each.
local now, max, keep = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local lease, fin = B .. ':lease', B .. ':fin'
local ids, keys, codes, records, seen = {}, {}, {}, {}, {}
for i = 4, #ARGV, 3 do
  local id = ARGV[i]
  if not seen[id] then
    seen[id] = true
    ids[#ids + 1] = id
    keys[#keys + 1] = ekey(id)
    codes[#codes + 1] = tonumber(ARGV[i + 1])
    records[#records + 1] = ARGV[i + 2]
  end
end
if #keys == 0 then
  return { 0, 0 }
end
local values = bulk_read('MGET', nil, keys)
local c = changes()
local n, logs = 0, {}
for j = 1, #keys do
  local v, to = values[j], codes[j]
  if v and (to == DELIVERED or to == DECLINED or to == DEAD) then
    local h = header_of(v)
    local e = parse(h)
    if e.state == FIRING then
      local id = ids[j]
      later_rem(c, lease, id)
      relist_later(c, id, e, to)
      local kept = h
      if to == DEAD then
        kept = v
      end
      later_set(c, keys[j], with_flags(with_state(kept, to, e.attempts, now, 0), stepless(e, false)))
      later_add(c, fin, ARGV[1], id)
      n = n + 1
      if records[j] ~= '' then
        logs[#logs + 1] = j
      end
    end
  end
end
flush(c)
local trimmed = 0
for _, j in ipairs(logs) do
  trimmed = trimmed + log_attempt(ids[j], records[j], max, keep)
end
return { n, trimmed }
