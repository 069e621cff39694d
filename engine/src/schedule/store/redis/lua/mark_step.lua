-- Firing entries are at a step of their callback (1 rechecking, 2
-- calling) since `now`: the step goes into the header's flags and `now`
-- into its updated_ms. ARGV: now, step, id...   Returns how many.
local now, step = tonumber(ARGV[1]), tonumber(ARGV[2])
local n = 0
for i = 3, #ARGV do
  local k = ekey(ARGV[i])
  local h = header(k)
  if h then
    local e = parse(h)
    if e.state == FIRING then
      -- One write from updated_ms (offset 6) to the flags (offset 40):
      -- the new time, the header's bytes between as they are, the flags.
      redis.call('SETRANGE', k, 6,
        struct.pack('>I8', now) .. string.sub(h, 15, 40) .. string.char(unstepped(e.flags) + STEP * step))
      n = n + 1
    end
  end
end
return n
