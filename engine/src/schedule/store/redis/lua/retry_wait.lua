-- Firing entries whose callback is to be tried again: each becomes
-- retry_wait until `at` (in `due`, so a claim takes it then, and in `rw`),
-- in the callback phase, its step cleared, its attempt logged, its calls
-- + 1 when the attempt counted.
-- ARGV: now, max, keep, then per entry: id, at, record ('' for none),
-- counted ('1' or '0') (max and keep bound the attempt log: `log_attempt`).
-- Returns { moved, trimmed }: how many moved, how many log records the
-- bound dropped.
local now, max, keep = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local lease, due, rw = B .. ':lease', B .. ':due', B .. ':rw'
local n, trimmed, seen = 0, 0, {}
for i = 4, #ARGV, 4 do
  local id, at, record, counted = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local k = ekey(id)
  local h = not seen[id] and header(k)
  seen[id] = true
  if h then
    local e = parse(h)
    if e.state == FIRING then
      if counted == '1' then
        -- First: it may write the whole value (see `put_calls`).
        put_calls(k, e, e.calls + 1)
      end
      redis.call('ZREM', lease, id)
      redis.call('ZADD', due, at, id)
      redis.call('ZADD', rw, at, id)
      relist(id, e, RETRY_WAIT)
      put_state(k, RETRY_WAIT, e.attempts, now, tonumber(at))
      put_flags(k, stepless(e, true))
      if record ~= '' then
        trimmed = trimmed + log_attempt(id, record, max, keep)
      end
      n = n + 1
    end
  end
end
return { n, trimmed }
