-- Claim due entries: scheduled or retry_wait with fire time <= now, or
-- firing with lease_until <= now (their firer crashed). Each becomes firing
-- until lease_until, attempts + 1, with no step (its callback flag stays:
-- the caller reads the phase from the value).
-- ARGV: now, lease_until, want, id...
-- The ids are the caller's picks (the earliest across shards). One that is
-- no longer due here (another router claimed it, or it was cancelled) is
-- replaced by this shard's next due entries, up to `want` in all.
-- Returns id, fire time, value, ... for each claimed entry: the value as
-- it was before the claim (the caller knows the header's new state:
-- firing, attempts + 1); empty for an index entry whose entry is missing
-- (it is dropped).
--
-- The picks are re-checked with one ZMSCORE per set and read with one
-- MGET; per entry there is one SETRANGE (the header's state, in place).
-- The moves between sorted sets are gathered and made with one variadic
-- call per set (`changes`); the variadic calls go in slices (`bulk_read`).
local now, lease_until, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local due, lease, rw = B .. ':due', B .. ':lease', B .. ':rw'
local out, n, done = {}, 0, {}
local c = changes()

-- Claim `picks` ({id, set it is due in, fire time} each, in order; each
-- already marked in `done`).
local function claim_all(picks)
  if #picks == 0 then
    return
  end
  local keys = {}
  for i, p in ipairs(picks) do
    keys[i] = ekey(p[1])
  end
  local values = bulk_read('MGET', nil, keys)
  for i, p in ipairs(picks) do
    local id, from, score, v = p[1], p[2], p[3], values[i]
    later_rem(c, from, id)
    out[#out + 1] = id
    out[#out + 1] = score
    if v then
      later_add(c, lease, ARGV[2], id)
      local state = string.byte(v, 2)
      if state == RETRY_WAIT then
        later_rem(c, rw, id)
      elseif state ~= FIRING and state ~= SCHEDULED then
        -- Not reached while the indexes agree with the headers; kept so
        -- that an entry in another state still moves to its list.
        relist_later(c, id, parse(v), FIRING)
      end
      put_state(keys[i], FIRING, struct.unpack('>I4', v, 3) + 1, now, lease_until)
      local flags = string.byte(v, 41)
      if math.floor(flags / STEP) % 4 > 0 then
        -- A step left by the firer whose lease ran out.
        put_flags(keys[i], unstepped(flags))
      end
      out[#out + 1] = v
      n = n + 1
    else
      out[#out + 1] = ''
    end
  end
end

-- The caller's picks that are still due here, in its order.
local ids, seen = {}, {}
for i = 4, #ARGV do
  local id = ARGV[i]
  if not seen[id] then
    seen[id] = true
    ids[#ids + 1] = id
  end
end
local picks = {}
if #ids > 0 then
  local in_due = bulk_read('ZMSCORE', due, ids)
  local in_lease = bulk_read('ZMSCORE', lease, ids)
  for i, id in ipairs(ids) do
    local s = in_due[i]
    local from = due
    if not (s and tonumber(s) <= now) then
      from, s = lease, in_lease[i]
    end
    if s and tonumber(s) <= now then
      done[id] = true
      picks[#picks + 1] = { id, from, s }
    end
  end
end
claim_all(picks)

-- Replacements for picks lost to other claimers, earliest fire time first
-- (an entry claimed above is back in lease only with a zero lease: skipped).
flush(c)
if n < want then
  local a = redis.call('ZRANGE', due, '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, want - n, 'WITHSCORES')
  local b = redis.call('ZRANGE', lease, '-inf', ARGV[1], 'BYSCORE', 'LIMIT', 0, want - n, 'WITHSCORES')
  local more = {}
  local ia, ib = 1, 1
  while n + #more < want do
    local sa, sb = a[ia + 1], b[ib + 1]
    if sa and (not sb or tonumber(sa) <= tonumber(sb)) then
      if not done[a[ia]] then
        done[a[ia]] = true
        more[#more + 1] = { a[ia], due, sa }
      end
      ia = ia + 2
    elseif sb then
      if not done[b[ib]] then
        done[b[ib]] = true
        more[#more + 1] = { b[ib], lease, sb }
      end
      ib = ib + 2
    else
      break
    end
  end
  claim_all(more)
end
flush(c)
return out
