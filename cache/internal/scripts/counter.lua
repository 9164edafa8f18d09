-- Move the namespace's invalidation counter on (advance.lua, prepended).
-- KEYS[1] the namespace's counter and mark {ns}:inv; ARGV[1] the caller's
-- floor (the highest generation it has seen), ARGV[2] the step: 1 for an
-- invalidation, 0 to restore a counter found below the floor.
-- Returns the counter's new value.
return advance(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]))
