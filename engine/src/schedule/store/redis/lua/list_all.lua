-- Upgrade (meta `lists` 2): every entry is listed in l:<state>, one with a
-- topic in l:<state>:<topic> as well. One SCAN step over this node for the
-- shard's list keys: each topic's list is unioned into its state's.
-- ARGV: cursor. Returns the next cursor ("0": done).
local pattern = string.gsub(B, '([%*%?%[%]\\])', '\\%1') .. ':l:*'
local r = redis.call('SCAN', ARGV[1], 'MATCH', pattern, 'COUNT', 1000)
local base = B .. ':l:'
for _, k in ipairs(r[2]) do
  local rest = string.sub(k, #base + 1)
  local colon = string.find(rest, ':', 1, true)
  if colon then
    local all = base .. string.sub(rest, 1, colon - 1)
    redis.call('ZUNIONSTORE', all, 2, all, k)
  end
end
return r[1]
