package lifecycle

// Keys is how many keys g holds: those with calls waiting or running.
func (g *NextGate) Keys() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.keys)
}
