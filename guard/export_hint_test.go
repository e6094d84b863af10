package guard

// HintsKept returns how many keys and names l remembers hold times for.
func HintsKept(l *Locker) (keys, names int) {
	l.hints.mu.Lock()
	defer l.hints.mu.Unlock()
	return l.hints.keys.order.Len(), l.hints.names.order.Len()
}
