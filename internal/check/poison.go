package check

// Poison patterns fill output buffers before a call so that an element the
// implementation never wrote reads as wrong: 0xFF is NaN in every float
// type and -1 or the maximum in the integer ones; the others vary the bits
// so that a lucky match with one pattern is not a lucky match with all.
var poisonPatterns = [...]byte{0xFF, 0xA5, 0x7F, 0xFE}

// PoisonByte returns the poison pattern for case number i.
func PoisonByte(i int) byte { return poisonPatterns[uint(i)%uint(len(poisonPatterns))] }

// Poison fills b with the byte p.
func Poison(b []byte, p byte) {
	for i := range b {
		b[i] = p
	}
}

// Changed counts bytes of b that are not p (guard regions after an
// output must stay poisoned).
func Changed(b []byte, p byte) (changed int) {
	for _, x := range b {
		if x != p {
			changed++
		}
	}
	return changed
}
