-- Claim due entries: scheduled with fire time <= now, or firing with
-- lease_until <= now (their firer crashed). Each becomes firing until
-- lease_until, attempts + 1.
-- ARGV: now, lease_until, want, id...
-- The ids are the caller's picks (the earliest across shards). One that is
-- no longer due here (another router claimed it, or it was cancelled) is
-- replaced by this shard's next due entries, up to `want` in all.
-- Returns id, fire time, value, ... for each claimed entry; the value is
-- empty for an index entry whose entry is missing (it is dropped).
--
-- Per entry: one ZSCORE, one GET (the value, header included), one
-- SETRANGE; the moves between sorted sets are gathered and made with one
-- variadic call per set (`changes`).
local now, lease_until, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local due, lease = B .. ':due', B .. ':lease'
local out, n, done = {}, 0, {}
local c = changes()

local function claim(id, from, score)
  done[id] = true
  later_rem(c, from, id)
  local k = ekey(id)
  local v = redis.call('GET', k)
  if not v then
    out[#out + 1] = id
    out[#out + 1] = score
    out[#out + 1] = ''
    return
  end
  local e = parse(v)
  later_add(c, lease, ARGV[2], id)
  if e.state ~= FIRING then
    relist_later(c, id, e, FIRING)
  end
  put_state(k, FIRING, e.attempts + 1, now, lease_until)
  -- The value as stored now: the header just updated in place.
  out[#out + 1] = id
  out[#out + 1] = score
  out[#out + 1] = with_state(v, FIRING, e.attempts + 1, now, lease_until)
  n = n + 1
end

-- The zset an id is due in, and its fire time; nil when not due.
local function due_in(id)
  local s = redis.call('ZSCORE', due, id)
  if s and tonumber(s) <= now then
    return due, s
  end
  s = redis.call('ZSCORE', lease, id)
  if s and tonumber(s) <= now then
    return lease, s
  end
  return nil
end

for i = 4, #ARGV do
  if not done[ARGV[i]] then
    local from, score = due_in(ARGV[i])
    if from then
      claim(ARGV[i], from, score)
    end
  end
end

-- Replacements for picks lost to other claimers, earliest fire time first
-- (an entry claimed above is back in lease only with a zero lease: skipped).
flush(c)
if n < want then
  local a = redis.call('ZRANGE', due, '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, want - n, 'WITHSCORES')
  local b = redis.call('ZRANGE', lease, '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, want - n, 'WITHSCORES')
  local ia, ib = 1, 1
  while n < want do
    local sa, sb = a[ia + 1], b[ib + 1]
    if sa and (not sb or tonumber(sa) <= tonumber(sb)) then
      if not done[a[ia]] then
        claim(a[ia], due, sa)
      end
      ia = ia + 2
    elseif sb then
      if not done[b[ib]] then
        claim(b[ib], lease, sb)
      end
      ib = ib + 2
    else
      break
    end
  end
end
flush(c)
return out
