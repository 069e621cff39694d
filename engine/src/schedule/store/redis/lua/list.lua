-- One page of a (state, topic) list. ARGV: list (state[:topic]), start
-- ('-' or '(' .. member), count. Returns member, header, ...
local ms = redis.call('ZRANGE', B .. ':l:' .. ARGV[1], ARGV[2], '+', 'BYLEX', 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, m in ipairs(ms) do
  local h = header(ekey(string.sub(m, 9)))
  out[#out + 1] = m
  out[#out + 1] = h or ''
end
return out
