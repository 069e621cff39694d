-- Claim ids in the idempotency ledger (docs/publishing.md#idempotency).
-- KEYS[1]: the shard's base. ARGV: (id, due_ms, hold_until_ms) triples.
-- Each id is the key <base>:id:<id>, holding the due time of the
-- publication that took it, expiring at hold_until_ms. Returns one value
-- per triple: -1 when it was free and is now taken, else the holder's due
-- time (a string). An id twice in one call: the second finds the first.
local out = {}
for i = 1, #ARGV, 3 do
  local k = B .. ':id:' .. ARGV[i]
  local held = redis.call('GET', k)
  if held then
    out[#out + 1] = held
  else
    redis.call('SET', k, ARGV[i + 1], 'PXAT', ARGV[i + 2])
    out[#out + 1] = -1
  end
end
return out
