-- Insert new entries, scheduled. ARGV, for n entries, in the order of
-- the answer (the caller sorts them by topic, so that each list section
-- below covers consecutive entries):
--   n
--   n pairs  key, value       (key: <base>:e:<id>)
--   n pairs  due, id          (due: the header's due time as decimal text)
--   sections until the end, one per topic in entry order:
--            topic ('' for none), m, then m pairs 0, member
--            (member: due as 8 bytes big-endian ++ id)
-- Everything is ready to hand to Redis as it is: the script builds no
-- string per entry.
-- Returns n when every entry was stored; otherwise, per entry, 1 when
-- stored or the header of the entry that already has that id (in any
-- state, until purged: nothing changes).
--
-- The usual batch is all new: one MSETNX stores every value or none, and
-- then one variadic ZADD per sorted set indexes them, three redis.calls
-- for the whole batch (a redis.call and the Lua values made for each
-- entry are most of a script's cost per entry). When any id exists,
-- MSETNX stores nothing and the entries go one at a time: a SET NX each,
-- the stored ones' index entries added at the end. Atomic all the same:
-- Redis runs the whole script before anything else.
local n = tonumber(ARGV[1])
local dues = 2 + 2 * n
local lists = dues + 2 * n

-- Whether every value went in with one MSETNX (at most 8,000 values fit
-- one call; the store's configuration keeps batches well under that).
local function all_at_once()
  if 2 * n > 4000 then
    return false
  end
  return redis.call('MSETNX', unpack(ARGV, 2, dues - 1)) == 1
end

if n > 0 and all_at_once() then
  redis.call('ZADD', B .. ':due', unpack(ARGV, dues, lists - 1))
  local i = lists
  while i <= #ARGV do
    local topic, m = ARGV[i], tonumber(ARGV[i + 1])
    redis.call('ZADD', lkey(SCHEDULED, topic ~= '' and topic or nil), unpack(ARGV, i + 2, i + 1 + 2 * m))
    if topic ~= '' then
      redis.call('ZADD', lkey(SCHEDULED, nil), unpack(ARGV, i + 2, i + 1 + 2 * m))
    end
    i = i + 2 + 2 * m
  end
  return n
end

local out = {}
local due_args = {}
local members_of = {}
local section, left, topic = lists, 0, nil
for e = 0, n - 1 do
  while left == 0 do
    topic, left = ARGV[section], tonumber(ARGV[section + 1])
    if topic == '' then
      topic = nil
    end
    section = section + 2
  end
  local k, v = ARGV[2 + 2 * e], ARGV[3 + 2 * e]
  if redis.call('SET', k, v, 'NX') then
    due_args[#due_args + 1] = ARGV[dues + 2 * e]
    due_args[#due_args + 1] = ARGV[dues + 2 * e + 1]
    for _, lk in ipairs(topic and { lkey(SCHEDULED, topic), lkey(SCHEDULED, nil) } or { lkey(SCHEDULED, nil) }) do
      local members = members_of[lk]
      if not members then
        members = {}
        members_of[lk] = members
      end
      members[#members + 1] = 0
      members[#members + 1] = ARGV[section + 1]
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = header(k)
  end
  section = section + 2
  left = left - 1
end
bulk('ZADD', B .. ':due', due_args)
for lk, members in pairs(members_of) do
  bulk('ZADD', lk, members)
end
return out
