-- Firing when-online entries found their user offline: each becomes held
-- until its user comes online or `expires` passes. Entries in the callback
-- phase (their browser part done) are left alone.
-- ARGV: expires, now, token, id...
-- The caller has already added "<shard>:<token>" to each user's hint (in
-- the user's own shard). The token joins ht:<user> here, so that the hint
-- field outlives every entry this hold put here.
-- Returns the users something was held for.
local expires, now, token = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local users, seen = {}, {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local k = ekey(id)
  local h = header(k)
  if h then
    local e = parse(h)
    if e.state == FIRING and e.user and not e.callback then
      redis.call('ZREM', B .. ':lease', id)
      redis.call('ZADD', B .. ':hx', expires, id)
      redis.call('ZADD', B .. ':h:' .. e.user, 0, e.due .. id)
      relist(id, e, HELD)
      put_state(k, HELD, e.attempts, now, expires)
      if e.step > 0 then
        put_flags(k, stepless(e, false))
      end
      if not seen[e.user] then
        seen[e.user] = true
        users[#users + 1] = e.user
        redis.call('SADD', B .. ':ht:' .. e.user, token)
      end
    end
  end
end
return users
