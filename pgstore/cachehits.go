package pgstore

// ReplayCacheHits is how many claims the replay cache has answered without a
// round trip to the database since the store was made: replays, and
// mismatches found against a cached result. Zero without a cache. It is
// cheap (an atomic load), for a metrics callback such as idemotel's
// Options.ReplayCacheHits.
func (s *Store) ReplayCacheHits() int64 {
	if s.cache == nil {
		return 0
	}
	return s.cache.hits.Load()
}
