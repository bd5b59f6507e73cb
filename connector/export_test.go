package connector

// CloseIdleTransportConnections closes the idle connections of every shared transport,
// so that a test counts only the connections in use.
func CloseIdleTransportConnections() {
	transports.mu.Lock()
	defer transports.mu.Unlock()
	for _, list := range transports.entries {
		for _, t := range list {
			t.CloseIdleConnections()
		}
	}
}
