-- Held entries past their hold limit become expired (final).
-- ARGV: now, limit
-- Returns { count, { user, tokens, user, tokens, ... }, topics } with the
-- users whose held set here emptied, and the topic of each entry that
-- expired ('' without one).
local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local hx = B .. ':hx'
local ids = redis.call('ZRANGE', hx, '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, limit)
local n, users, seen, topics = 0, {}, {}, {}
for _, id in ipairs(ids) do
  redis.call('ZREM', hx, id)
  local k = ekey(id)
  local h = header(k)
  if h then
    local e = parse(h)
    if e.state == HELD then
      redis.call('ZREM', B .. ':h:' .. e.user, e.due .. id)
      finish(k, id, h, e, EXPIRED, now)
      n = n + 1
      topics[n] = e.topic or ''
      if not seen[e.user] then
        seen[e.user] = true
        users[#users + 1] = e.user
      end
    end
  end
end
local cleanup = {}
for _, user in ipairs(users) do
  local tokens = emptied(user)
  if #tokens > 0 then
    cleanup[#cleanup + 1] = user
    cleanup[#cleanup + 1] = tokens
  end
end
return { n, cleanup, topics }
