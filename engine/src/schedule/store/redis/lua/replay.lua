-- Send a dead letter again: it becomes retry_wait, due now (in `due` and
-- `rw`), in the callback phase, attempts and calls 0; its attempt log
-- stays.
-- ARGV: id, now
-- Returns { outcome, header }: outcome 0 not found, 1 replayed, 2 not dead
-- (nothing changed).
local id, now = ARGV[1], tonumber(ARGV[2])
local k = ekey(id)
local h = header(k)
if not h then
  return { 0 }
end
local e = parse(h)
if e.state ~= DEAD then
  return { 2, h }
end
redis.call('ZREM', B .. ':fin', id)
redis.call('ZADD', B .. ':due', ARGV[2], id)
redis.call('ZADD', B .. ':rw', ARGV[2], id)
relist(id, e, RETRY_WAIT)
put_state(k, RETRY_WAIT, 0, now, now)
put_flags(k, stepless(e, true))
put_calls(k, e, 0)
return { 1, header(k) }
