-- Firing entries that could not be delivered now: each becomes scheduled
-- again with fire time `retry` (its due time unchanged); one in the
-- callback phase goes back to retry_wait instead, keeping its phase.
-- ARGV: retry, now, id...   Returns how many were released.
local retry, now = tonumber(ARGV[1]), tonumber(ARGV[2])
local n = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local k = ekey(id)
  local h = header(k)
  if h then
    local e = parse(h)
    if e.state == FIRING then
      redis.call('ZREM', B .. ':lease', id)
      redis.call('ZADD', B .. ':due', retry, id)
      if e.callback then
        redis.call('ZADD', B .. ':rw', retry, id)
        relist(id, e, RETRY_WAIT)
        put_state(k, RETRY_WAIT, e.attempts, now, retry)
      else
        relist(id, e, SCHEDULED)
        put_state(k, SCHEDULED, e.attempts, now, 0)
      end
      if e.step > 0 then
        put_flags(k, stepless(e, false))
      end
      n = n + 1
    end
  end
end
return n
