package server

import "time"

// DefaultEndedEntryRetention is how long an ended session's entry stays
// listed (pending, no acceptor, session_status terminated) unless Options
// say otherwise, so that clients of the fleet API see the session ended
// before its entry goes. The state machine's ended-entry sweep
// (lifecycle.Machine.SweepEnded) makes it a tombstone afterwards, which
// the queue feed later prunes as any other (queuefeed.Feed.Prune).
const DefaultEndedEntryRetention = 10 * time.Minute
