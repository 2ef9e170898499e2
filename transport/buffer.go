package transport

// Owner is the transport-side owner of lent memory. It is told when a Buffer
// it lent is released.
type Owner interface {
	// ReleaseBuffer takes back the memory lent as a Buffer with this id.
	ReleaseBuffer(id uint64, b []byte)
}

// Buffer is one message's bytes, possibly lent by a transport (a registered
// receive buffer, a send slot). It is a small value; copies share the same
// memory, and exactly one of them must be released, exactly once.
type Buffer struct {
	b     []byte
	owner Owner
	id    uint64
}

// NewBuffer wraps b, lent by owner under id. A nil owner means the memory
// belongs to the Go heap and Release only forgets it.
func NewBuffer(b []byte, owner Owner, id uint64) Buffer {
	return Buffer{b: b, owner: owner, id: id}
}

// Bytes returns the message bytes. They stay valid until Release.
func (b *Buffer) Bytes() []byte { return b.b }

// Len returns the message length.
func (b *Buffer) Len() int { return len(b.b) }

// ID returns the id the owner lent the buffer under.
func (b *Buffer) ID() uint64 { return b.id }

// Owned reports whether b was lent by owner o.
func (b *Buffer) Owned(o Owner) bool { return b.owner == o && o != nil }

// Release gives the memory back to its owner. Releasing the same Buffer
// variable twice is harmless; the bytes must not be used afterwards.
func (b *Buffer) Release() {
	if b.owner != nil {
		o := b.owner
		b.owner = nil
		o.ReleaseBuffer(b.id, b.b)
	}
	b.b = nil
}
