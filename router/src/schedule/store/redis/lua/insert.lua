-- Insert new entries, scheduled. ARGV: id, value, id, value, ...
-- Returns, per entry: 1 when stored, or the header of the entry that
-- already has that id (in any state, until purged: nothing changes).
local due = B .. ':due'
local out = {}
for i = 1, #ARGV, 2 do
  local id, v = ARGV[i], ARGV[i + 1]
  local k = ekey(id)
  if redis.call('SET', k, v, 'NX') then
    local e = parse(v)
    local due_ms = struct.unpack('>I8', v, 23)
    redis.call('ZADD', due, due_ms, id)
    redis.call('ZADD', lkey(SCHEDULED, e.topic), 0, e.due .. id)
    out[#out + 1] = 1
  else
    out[#out + 1] = header(k)
  end
end
return out
