package rpc

// IdleChecks is how many times cc's idle timer has looked, for tests
// that wait for it to look while a call is in progress.
func IdleChecks(cc *ClientConn) int64 { return cc.idleChecks.Load() }

// IdleWorkers is how many of s's workers wait for a job.
func IdleWorkers(s *Server) int {
	s.workers.mu.Lock()
	defer s.workers.mu.Unlock()
	return len(s.workers.idle)
}
