-- Insert new entries, scheduled. ARGV: id, value, due, topic, id, value,
-- due, topic, ... (due: the header's due time as decimal text, the `due`
-- score; topic: the header's topic, empty for none, so that the script
-- need not parse the header).
-- Returns, per entry: 1 when stored, or the header of the entry that
-- already has that id (in any state, until purged: nothing changes).
--
-- Each entry costs one SET NX; the index entries of the stored ones are
-- added with one variadic ZADD per sorted set at the end (a redis.call is
-- most of a script's cost per entry). Atomic all the same: Redis runs the
-- whole script before anything else.
local due = B .. ':due'
local out = {}
local due_args = {}
local lists = {}
for i = 1, #ARGV, 4 do
  local id, v = ARGV[i], ARGV[i + 1]
  local k = ekey(id)
  if redis.call('SET', k, v, 'NX') then
    due_args[#due_args + 1] = ARGV[i + 2]
    due_args[#due_args + 1] = id
    local topic = ARGV[i + 3]
    if topic == '' then
      topic = nil
    end
    local lk = lkey(SCHEDULED, topic)
    local members = lists[lk]
    if not members then
      members = {}
      lists[lk] = members
    end
    members[#members + 1] = 0
    -- due (8 bytes, big-endian, header offset 22) ++ id
    members[#members + 1] = string.sub(v, 23, 30) .. id
    out[#out + 1] = 1
  else
    out[#out + 1] = header(k)
  end
end
bulk('ZADD', due, due_args)
for lk, members in pairs(lists) do
  bulk('ZADD', lk, members)
end
return out
