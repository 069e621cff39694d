-- Cancel one entry. ARGV: id, now
-- Returns { outcome, header, user, tokens }: outcome 0 not found,
-- 1 cancelled (now or before; a dead letter too), 2 too late (firing or
-- another final state).
-- A cancelled retry_wait entry keeps its attempt log (until purged).
-- user and tokens are set when cancelling emptied the user's held set here.
local id, now = ARGV[1], tonumber(ARGV[2])
local k = ekey(id)
local h = header(k)
if not h then
  return { 0 }
end
local e = parse(h)
if e.state == SCHEDULED then
  redis.call('ZREM', B .. ':due', id)
  finish(k, id, h, e, CANCELLED, now)
  return { 1, header(k), '', {} }
elseif e.state == RETRY_WAIT then
  redis.call('ZREM', B .. ':due', id)
  redis.call('ZREM', B .. ':rw', id)
  finish(k, id, h, e, CANCELLED, now)
  return { 1, header(k), '', {} }
elseif e.state == HELD then
  redis.call('ZREM', B .. ':hx', id)
  redis.call('ZREM', B .. ':h:' .. e.user, e.due .. id)
  finish(k, id, h, e, CANCELLED, now)
  return { 1, header(k), e.user, emptied(e.user) }
elseif e.state == DEAD then
  -- A dead letter cancelled is one nobody will send again.
  finish(k, id, h, e, CANCELLED, now)
  return { 1, header(k), '', {} }
elseif e.state == CANCELLED then
  return { 1, h, '', {} }
end
return { 2, h, '', {} }
