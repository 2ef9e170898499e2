package transport

// Owner is the transport-side owner of lent memory. It is told when a Buffer
// it lent is released.
type Owner interface {
	// ReleaseBuffer takes back the memory lent as a Buffer with this id.
	ReleaseBuffer(id uint64, b []byte)
}

// Detacher is an Owner that can give lent memory up for good. DetachBuffer
// settles what the Buffer with this id held besides its memory (a receive
// budget) as ReleaseBuffer would, keeps no reference to b and reports true;
// false: the memory cannot leave the owner (registered memory) and nothing
// changed.
type Detacher interface {
	Owner
	DetachBuffer(id uint64, b []byte) bool
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

// Detach takes b's memory out of its owner for good, when the owner is a
// Detacher that allows it: the bytes are then the caller's, like any heap
// slice, and the owner never reuses them; b is emptied, so a Release after
// it does nothing. ok false: b is unchanged, and must be released as usual
// (its bytes copied if they are to be kept). A receiver uses it to decode
// a message straight from the bytes it arrived in, or to keep them beyond
// the transport's receive budget (which Detach gives back) without a copy.
func (b *Buffer) Detach() (data []byte, ok bool) {
	o, can := b.owner.(Detacher)
	if !can || !o.DetachBuffer(b.id, b.b) {
		return nil, false
	}
	data = b.b
	*b = Buffer{}
	return data, true
}

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
