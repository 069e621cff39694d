-- The headers of entries (reads only). ARGV: id...
-- Returns one header per id, or an empty string when there is none.
local out = {}
for i = 1, #ARGV do
  out[i] = header(ekey(ARGV[i])) or ''
end
return out
