-- A user came online: claim entries held here for them. Each becomes
-- firing until lease_until, attempts + 1.
-- ARGV: user, now, lease_until, n, member...
-- With members (due(8 bytes)..id, the caller's picks across shards): those
-- still held here. Without: the first n by (due, id).
-- Returns { tokens, { id, value, ... } }: tokens (see `emptied`) when
-- nothing is held here for the user any more.
local user, now, lease_until, n = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local hk = B .. ':h:' .. user
local lease = B .. ':lease'
local members
if #ARGV > 4 then
  members = {}
  for i = 5, #ARGV do
    members[#members + 1] = ARGV[i]
  end
elseif n > 0 then
  members = redis.call('ZRANGE', hk, '-', '+', 'BYLEX', 'LIMIT', 0, n)
else
  members = {}
end
local out = {}
for _, m in ipairs(members) do
  if redis.call('ZREM', hk, m) == 1 then
    local id = string.sub(m, 9)
    local k = ekey(id)
    local h = header(k)
    redis.call('ZREM', B .. ':hx', id)
    out[#out + 1] = id
    if h then
      local e = parse(h)
      redis.call('ZADD', lease, lease_until, id)
      relist(id, e, FIRING)
      put_state(k, FIRING, e.attempts + 1, now, lease_until)
      out[#out + 1] = redis.call('GET', k)
    else
      out[#out + 1] = ''
    end
  end
end
return { emptied(user), out }
