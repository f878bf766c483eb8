package audit

import "fmt"

// Verification is what checking the chain found.
type Verification struct {
	// OK is true when every entry holds.
	OK bool `json:"ok"`
	// Checked counts the entries read.
	Checked int `json:"checked"`
	// FirstBad is the audit_log_id of the first entry that does not hold
	// ("" when OK): edited, or following one that was removed.
	FirstBad string `json:"first_bad,omitempty"`
	// Reason says what is wrong with FirstBad.
	Reason string `json:"reason,omitempty"`
}

// Verifier checks a chain's entries, fed in seq order from the anchor.
type Verifier struct {
	prevSeq  int64
	prevHash string
	res      Verification
	done     bool
}

// NewVerifier starts at the anchor: the seq and hash of the last entry
// retention removed (0 and "" when none was).
func NewVerifier(anchorSeq int64, anchorHash string) *Verifier {
	return &Verifier{prevSeq: anchorSeq, prevHash: anchorHash}
}

// Next checks e, the entry after the last one given; false once an entry
// failed (the rest need not be read).
func (v *Verifier) Next(e *Entry) bool {
	if v.done {
		return false
	}
	v.res.Checked++
	switch {
	case e.ID != IDFor(e.Seq):
		v.fail(e.ID, "its id does not match its position in the chain")
	case e.Seq != v.prevSeq+1:
		v.fail(e.ID, fmt.Sprintf("the entries before it (from %s) are missing", IDFor(v.prevSeq+1)))
	case Chain(v.prevHash, e) != e.Hash:
		v.fail(e.ID, "its hash does not match its content and the entry before it")
	default:
		v.prevSeq, v.prevHash = e.Seq, e.Hash
		return true
	}
	return false
}

func (v *Verifier) fail(id, reason string) {
	v.done = true
	v.res.FirstBad, v.res.Reason = id, reason
}

// Finish compares the last entry read with the chain's head (the seq and
// hash the store recorded with the newest append), which catches entries
// removed from the end.
func (v *Verifier) Finish(headSeq int64, headHash string) Verification {
	if !v.done {
		switch {
		case headSeq != v.prevSeq:
			v.fail(IDFor(v.prevSeq+1), fmt.Sprintf("the entries from it to %s are missing", IDFor(headSeq)))
		case headHash != v.prevHash:
			v.fail(IDFor(headSeq), "its hash does not match the chain's head")
		default:
			v.res.OK = true
		}
	}
	return v.res
}
