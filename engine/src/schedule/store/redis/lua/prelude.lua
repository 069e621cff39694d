-- Shared by every Herald store script: prepended to each one.
--
-- KEYS[1] is one shard's key base, e.g. "herald:{7}". Every key a script
-- touches is that base plus a suffix, so all of them carry the hash tag
-- {7}: one hash slot, one Redis Cluster node, one atomic script.
--
--   <base>:e:<id>               the entry: header, then the record (header
--                               only once final, except a dead letter's)
--   <base>:due                  ZSET fire time -> id        (scheduled and
--                               retry_wait)
--   <base>:rw                   ZSET fire time -> id        (retry_wait only:
--                               counts subtract it from due)
--   <base>:lease                ZSET lease_until -> id      (firing)
--   <base>:hx                   ZSET hold expiry -> id      (held)
--   <base>:fin                  ZSET updated -> id          (final; purge)
--   <base>:a:<id>               LIST of attempt records, oldest first
--                               (bounded: `log_attempt`; removed by purge)
--   <base>:l:<state>[:<topic>]  ZSET, score 0, member due(8 bytes BE)..id
--                               (firing and retry_wait entries in scheduled's);
--                               every entry is in l:<state>, one with a
--                               topic in l:<state>:<topic> as well
--   <base>:h:<user>             ZSET, score 0, member due(8 bytes BE)..id:
--                               the entries held here for user
--   <base>:ht:<user>            SET of tokens of the holds applied here for
--                               user since the last time h:<user> emptied
--
-- Header (big-endian; Lua offsets are 1-based, byte offsets 0-based):
--   0 u8 layout | 1 u8 state | 2 u32 attempts | 6 u64 updated_ms
--   14 u64 deadline (lease_until when firing, hold expiry when held, next
--          attempt when retry_wait, else 0)
--   22 u64 due_ms | 30 u64 accepted_ms | 38 u16 header length
--   40 u8 flags (1 topic, 2 user, 4 callback phase: browsers done,
--          8 * step: 1 rechecking, 2 calling, while firing; 32 has calls)
--   41 [u16 len, topic] [u16 len, user]
--   [u32 calls: the header's last 4 bytes, when flag 32 is set]
-- `calls` counts the callback attempts made under the retry policy. An
-- entry stored before they were kept has no such field (calls 0): its
-- first counted attempt rewrites its value with one (`add_calls`).
--
-- Scripts never compare strings (Lua's `<` on strings follows the server's
-- locale): ordering by (time, id) is done by the sorted sets (scores, and
-- byte-wise lexical order for score-0 sets) and by the Rust caller.

local B = KEYS[1]
local SCHEDULED, FIRING, HELD, DELIVERED, CANCELLED, EXPIRED = 0, 1, 2, 3, 4, 5
local RETRY_WAIT, DECLINED, DEAD = 6, 7, 8
local STATE = {
  [0] = 'scheduled', 'firing', 'held', 'delivered', 'cancelled', 'expired',
  'retry_wait', 'declined', 'dead',
}
-- The states nothing fires any more (purge removes them after retention).
local FINAL = { [DELIVERED] = true, [CANCELLED] = true, [EXPIRED] = true, [DECLINED] = true, [DEAD] = true }
-- Flag bits: the callback phase, the unit of the step (flags / 8 % 4), and
-- "the header ends with calls".
local CALLBACK, STEP, HAS_CALLS = 4, 8, 32

local function ekey(id)
  return B .. ':e:' .. id
end

-- The header of the entry at key k, or nil when there is none. Reads the
-- header only, never the record (which may be large).
local function header(k)
  local h = redis.call('GETRANGE', k, 0, 255)
  if h == '' then
    return nil
  end
  local len = struct.unpack('>H', h, 39)
  if len > #h then
    return redis.call('GETRANGE', k, 0, len - 1)
  end
  return string.sub(h, 1, len)
end

-- The header of a whole value read with GET or MGET.
local function header_of(v)
  return string.sub(v, 1, (struct.unpack('>H', v, 39)))
end

-- What the scripts need from a header (or a whole value).
local function parse(h)
  local e = {}
  e.state = string.byte(h, 2)
  e.attempts = struct.unpack('>I4', h, 3)
  e.due = string.sub(h, 23, 30)
  local flags = string.byte(h, 41)
  e.flags = flags
  e.callback = flags % 8 >= CALLBACK
  e.step = math.floor(flags / STEP) % 4
  e.len = struct.unpack('>H', h, 39)
  e.has_calls = math.floor(flags / HAS_CALLS) % 2 == 1
  e.calls = 0
  if e.has_calls then
    e.calls = struct.unpack('>I4', h, e.len - 3)
  end
  local pos = 42
  if flags % 2 == 1 then
    local n = struct.unpack('>H', h, pos)
    e.topic = string.sub(h, pos + 2, pos + 1 + n)
    pos = pos + 2 + n
  end
  if flags % 4 >= 2 then
    local n = struct.unpack('>H', h, pos)
    e.user = string.sub(h, pos + 2, pos + 1 + n)
  end
  return e
end

-- The list key of a state (and topic), remembered for the script's run:
-- a script walking thousands of entries asks for the same few keys.
local lkeys = {}
local function lkey(state, topic)
  local by_topic = lkeys[state]
  if not by_topic then
    by_topic = {}
    lkeys[state] = by_topic
  end
  local k = by_topic[topic or false]
  if not k then
    k = B .. ':l:' .. STATE[state]
    if topic then
      k = k .. ':' .. topic
    end
    by_topic[topic or false] = k
  end
  return k
end

-- Whether firing's own list exists for `topic`: only an older Herald,
-- which listed firing entries apart, made one. Asked once per script run.
local firing_lists = {}
local function firing_list(topic)
  local k = lkey(FIRING, topic)
  local exists = firing_lists[k]
  if exists == nil then
    exists = redis.call('EXISTS', k) == 1
    firing_lists[k] = exists
  end
  return exists
end

-- The state whose list an entry in `state` is in: firing and retry_wait
-- entries stay in scheduled's, so a claim (the busiest change) and a
-- callback's retry leave the lists alone.
local function listed(state)
  if state == FIRING or state == RETRY_WAIT then
    return SCHEDULED
  end
  return state
end

-- Sorted-set changes (and whole values to write) gathered while a script
-- walks its entries, made by `flush` with one variadic call per key and
-- command (scores as text, as the caller passed them): a redis.call costs
-- more than the change it makes, so a script touching thousands of
-- entries makes a few calls per key, not a few per entry. Removals go
-- before additions, so an id removed and added again ends up added.
local function changes()
  return { rem = {}, add = {}, order = {}, sets = {} }
end

-- A value to write with the others at `flush` (one variadic MSET).
local function later_set(c, key, value)
  c.sets[#c.sets + 1] = key
  c.sets[#c.sets + 1] = value
end

-- The list of pending `which` ('rem' or 'add') changes of `key`.
local function pending(c, which, key)
  local t = c[which][key]
  if not t then
    if not c.rem[key] and not c.add[key] then
      c.order[#c.order + 1] = key
    end
    t = {}
    c[which][key] = t
  end
  return t
end

local function later_rem(c, key, member)
  local t = pending(c, 'rem', key)
  t[#t + 1] = member
end

local function later_add(c, key, score, member)
  local t = pending(c, 'add', key)
  t[#t + 1] = score
  t[#t + 1] = member
end

-- `cmd key args...` (`cmd args...` when key is nil) over `args` in
-- slices: Lua's unpack takes at most a few thousand values (an even slice
-- keeps ZADD's score, member pairs and MSET's key, value pairs). Hands
-- each slice's answer to `each` (with the slice's length), when given.
local function in_slices(cmd, key, args, each)
  local i, n = 1, #args
  while i <= n do
    local j = math.min(i + 3999, n)
    local r
    if key then
      r = redis.call(cmd, key, unpack(args, i, j))
    else
      r = redis.call(cmd, unpack(args, i, j))
    end
    if each then
      each(r, j - i + 1)
    end
    i = j + 1
  end
end

-- A write over `args` in slices (see `in_slices`).
local function bulk(cmd, key, args)
  in_slices(cmd, key, args)
end

-- A read answering one value per argument (MGET, ZMSCORE), over `args` in
-- slices: the answers of every slice in one list (false where there is
-- none).
local function bulk_read(cmd, key, args)
  local out = {}
  in_slices(cmd, key, args, function(r, len)
    for k = 1, len do
      out[#out + 1] = r[k]
    end
  end)
  return out
end

local function flush(c)
  bulk('MSET', nil, c.sets)
  for _, key in ipairs(c.order) do
    if c.rem[key] then
      bulk('ZREM', key, c.rem[key])
    end
  end
  for _, key in ipairs(c.order) do
    if c.add[key] then
      bulk('ZADD', key, c.add[key])
    end
  end
  c.rem, c.add, c.order, c.sets = {}, {}, {}, {}
end

-- Move the entry from its state's list to state `to`'s, the sorted-set
-- changes gathered in `c` (see `changes`). An entry an older Herald
-- claimed may be in firing's own list: it is removed from there too, when
-- that list exists.
local function relist_later(c, id, e, to)
  local from, dest = listed(e.state), listed(to)
  local legacy = e.state == FIRING and firing_list(e.topic)
  if from == dest and not legacy then
    return
  end
  local m = e.due .. id
  if legacy then
    later_rem(c, lkey(FIRING, e.topic), m)
    if e.topic then
      later_rem(c, lkey(FIRING, nil), m)
    end
  end
  if from ~= dest then
    later_rem(c, lkey(from, e.topic), m)
    if e.topic then
      later_rem(c, lkey(from, nil), m)
    end
  end
  later_add(c, lkey(dest, e.topic), 0, m)
  if e.topic then
    later_add(c, lkey(dest, nil), 0, m)
  end
end

-- Move the entry from its state's list to state `to`'s, now.
local function relist(id, e, to)
  local c = changes()
  relist_later(c, id, e, to)
  flush(c)
end

-- The mutable part of a header: the bytes after the layout byte, up to
-- `due_ms`.
local function state_bytes(state, attempts, now, deadline)
  return struct.pack('>BI4I8I8', state, attempts, now, deadline)
end

-- `v` (a header, or a whole value) with its mutable part replaced.
local function with_state(v, state, attempts, now, deadline)
  return string.sub(v, 1, 1) .. state_bytes(state, attempts, now, deadline) .. string.sub(v, 23)
end

-- Overwrite the mutable part of the header in place.
local function put_state(k, state, attempts, now, deadline)
  redis.call('SETRANGE', k, 1, state_bytes(state, attempts, now, deadline))
end

-- `v` (a header, or a whole value) with flags `flags`.
local function with_flags(v, flags)
  return string.sub(v, 1, 40) .. string.char(flags) .. string.sub(v, 42)
end

-- Overwrite the flags of the header in place.
local function put_flags(k, flags)
  redis.call('SETRANGE', k, 40, string.char(flags))
end

-- `flags` without the step bits (the others stay).
local function unstepped(flags)
  return flags - STEP * (math.floor(flags / STEP) % 4)
end

-- The flags of parsed header `e` without its step; with the callback bit
-- when `callback`.
local function stepless(e, callback)
  local f = unstepped(e.flags)
  if callback and f % 8 < CALLBACK then
    f = f + CALLBACK
  end
  return f
end

-- Set the calls of the entry at key k (parsed header `e`, updated) to
-- `calls`: in place when its header has them; otherwise (an entry stored
-- before calls were kept) its value is written again with them at the end
-- of its header, which grows by 4 bytes. Nothing to write for 0 there.
local function put_calls(k, e, calls)
  calls = math.min(calls, 4294967295)
  if e.has_calls then
    redis.call('SETRANGE', k, e.len - 4, struct.pack('>I4', calls))
  elseif calls > 0 then
    local v = redis.call('GET', k)
    local flags = e.flags + HAS_CALLS
    redis.call('SET', k, string.sub(v, 1, 38) .. struct.pack('>H', e.len + 4) .. string.char(flags)
      .. string.sub(v, 42, e.len) .. struct.pack('>I4', calls) .. string.sub(v, e.len + 1))
    e.flags, e.has_calls, e.len = flags, true, e.len + 4
  end
  e.calls = calls
end

-- Append attempt `record` to the log of entry `id`. The log holds at most
-- `max` records: when a record makes it longer, the one at index `keep`
-- (the oldest after the first `keep`) goes, so the first `keep` and the
-- latest stay. Records are never empty (a version byte first), so an empty
-- string marks the one to remove. Returns 1 when one was removed, else 0.
local function log_attempt(id, record, max, keep)
  local ak = B .. ':a:' .. id
  local n = redis.call('RPUSH', ak, record)
  if n > max then
    redis.call('LSET', ak, keep, '')
    redis.call('LREM', ak, 1, '')
    return 1
  end
  return 0
end

-- `finish`, with its sorted-set changes gathered in `c`; `now_text` is
-- `now` as the caller passed it (a Lua number handed to a redis.call is
-- formatted with sprintf, per entry).
local function finish_later(c, k, id, h, e, state, now, now_text)
  relist_later(c, id, e, state)
  later_set(c, k, with_state(h, state, e.attempts, now, 0))
  later_add(c, B .. ':fin', now_text, id)
end

-- Make an entry final: its status stays (header only: the body is dropped),
-- listed under its new state and queued for purge.
local function finish(k, id, h, e, state, now)
  local c = changes()
  finish_later(c, k, id, h, e, state, now, now)
  flush(c)
end

-- When nothing is held here for user any more, hand back (and forget) the
-- tokens of the holds applied here since the last time: the caller removes
-- them from the user's hint.
local function emptied(user)
  if redis.call('EXISTS', B .. ':h:' .. user) == 1 then
    return {}
  end
  local ht = B .. ':ht:' .. user
  local tokens = redis.call('SMEMBERS', ht)
  if #tokens > 0 then
    redis.call('DEL', ht)
  end
  return tokens
end

