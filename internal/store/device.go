package store

import (
	"errors"
	"time"
)

// Device grant states.
const (
	// DevicePending: nobody has decided yet.
	DevicePending = "pending"
	// DeviceApproved: a person approved; the next poll receives the token.
	DeviceApproved = "approved"
	// DeviceDenied: a person denied; every later poll is refused.
	DeviceDenied = "denied"
	// DeviceUsed: the token was handed out; the code is spent.
	DeviceUsed = "used"
)

// DeviceGrant is one device code of the OAuth 2.0 device authorization
// grant (RFC 8628): what a client asked for, and what became of it. Only
// the hash of the device code is kept.
type DeviceGrant struct {
	// DeviceHash is the hex SHA-256 of the device code.
	DeviceHash string
	// UserCode is what a person types or follows, XXXX-XXXX.
	UserCode string
	// ClientID and ClientName say what is asking (outpost-cli on host
	// x); both as the client sent them, for the approver to judge.
	ClientID, ClientName string
	// Scopes are the scopes asked for; none means the approver's own.
	Scopes []string
	// Outpost is the name of the outpost the token is to be limited to,
	// as asked (resolved when a person approves, so that a client that
	// has not signed in learns nothing of which outposts exist); "" for
	// none.
	Outpost string
	// SourceIP is the address the request came from.
	SourceIP  string
	CreatedAt time.Time
	ExpiresAt time.Time
	// Interval is the least time between two polls.
	Interval time.Duration
	// LastPollAt is the time of the last poll; nil before the first.
	LastPollAt *time.Time
	// State is DevicePending, DeviceApproved, DeviceDenied or DeviceUsed.
	State string
	// ApprovedBy is the id of the token that approved or denied.
	ApprovedBy string
	// DecidedAt is when it was approved or denied; nil while pending.
	DecidedAt *time.Time
	// Token is the token to mint once approved: name, scopes, outpost
	// and expiry (ID, Hash and CreatedAt are set when it is minted).
	Token Token
	// TokenID is the id of the token minted; "" until used.
	TokenID string
}

// DeviceUpdate is what UpdateDeviceGrant's fn writes: the grant, and a
// token to insert in the same transaction (nil: none).
type DeviceUpdate struct {
	Grant DeviceGrant
	Token *Token
}

// ErrTooManyDeviceGrants: too many device codes are pending to start
// another.
var ErrTooManyDeviceGrants = errors.New("too many pending device grants")
