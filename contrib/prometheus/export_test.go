package prometheus

// KnownMethods is how many methods m resolved and keeps.
func (m *metrics) KnownMethods() int { return m.methods.len() }
