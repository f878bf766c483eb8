package api

// The OAuth 2.0 device authorization grant (RFC 8628), served by Outpost so
// that a CLI or a worker gets a token without anyone pasting one: the
// client asks for a code (DeviceCodePath), shows a person the user code and
// the verification URL, and polls (DeviceTokenPath) while the person, signed
// in to the web UI, approves or denies (DeviceApprovePath, DeviceDenyPath).
//
// DeviceCodePath and DeviceTokenPath speak OAuth 2.0's wire format, so any
// OAuth client library can use them: form-encoded (or JSON) requests, and
// errors as {"error": "<code>", "error_description": "<sentence>"}
// (RFC 6749 §5.2) rather than the envelope of the rest of the API.
const (
	// DeviceCodePath starts a grant (no authentication).
	DeviceCodePath = "/v1/auth/device/code"
	// DeviceTokenPath is polled for the token (no authentication).
	DeviceTokenPath = "/v1/auth/device/token"
	// DeviceGrantPath shows a pending grant by ?user_code= (admin).
	DeviceGrantPath = "/v1/auth/device"
	// DeviceApprovePath approves a grant (admin).
	DeviceApprovePath = "/v1/auth/device/approve"
	// DeviceDenyPath denies a grant (admin).
	DeviceDenyPath = "/v1/auth/device/deny"
	// DeviceVerifyPath is the web UI page where a person approves.
	DeviceVerifyPath = "/ui/device"

	// DeviceGrantType is the grant_type a token request carries.
	DeviceGrantType = "urn:ietf:params:oauth:grant-type:device_code"

	// Client ids Outpost's own commands send.
	DeviceClientCLI    = "outpost-cli"
	DeviceClientWorker = "outpost-worker"
)

// OAuth error codes of the token endpoint (RFC 8628 §3.5, RFC 6749 §5.2).
const (
	OAuthAuthorizationPending = "authorization_pending"
	OAuthSlowDown             = "slow_down"
	OAuthAccessDenied         = "access_denied"
	OAuthExpiredToken         = "expired_token"
	OAuthInvalidRequest       = "invalid_request"
	OAuthInvalidGrant         = "invalid_grant"
	OAuthInvalidScope         = "invalid_scope"
	OAuthUnsupportedGrantType = "unsupported_grant_type"
	// OAuthTemporarilyUnavailable: too many codes are pending; try later.
	OAuthTemporarilyUnavailable = "temporarily_unavailable"
)

// DeviceCodeRequest is the body of POST DeviceCodePath, form-encoded or
// JSON.
type DeviceCodeRequest struct {
	// ClientID names the client (DeviceClientCLI, DeviceClientWorker or
	// any other); required.
	ClientID string `json:"client_id"`
	// ClientName says which machine asks (a host name), shown to the
	// approver.
	ClientName string `json:"client_name,omitempty"`
	// Scope is the scopes asked for, separated by spaces; empty asks for
	// the approver's own.
	Scope string `json:"scope,omitempty"`
	// Outpost is the name of the outpost the token is to be limited to.
	Outpost string `json:"outpost,omitempty"`
}

// DeviceCodeResponse answers DeviceCodePath (RFC 8628 §3.2).
type DeviceCodeResponse struct {
	// DeviceCode is the client's secret to poll with; shown once.
	DeviceCode string `json:"device_code"`
	// UserCode is what the person approves, XXXX-XXXX.
	UserCode string `json:"user_code"`
	// VerificationURI is the web UI page to open.
	VerificationURI string `json:"verification_uri"`
	// VerificationURIComplete is the page with the user code filled in.
	VerificationURIComplete string `json:"verification_uri_complete"`
	// ExpiresIn is the seconds the codes live.
	ExpiresIn int `json:"expires_in"`
	// Interval is the seconds to wait between two polls.
	Interval int `json:"interval"`
}

// DeviceTokenResponse answers DeviceTokenPath once approved (RFC 6749
// §5.1): the token's secret, shown once.
type DeviceTokenResponse struct {
	AccessToken string `json:"access_token"`
	// TokenType is "Bearer".
	TokenType string `json:"token_type"`
	// ExpiresIn is the seconds the token lives; absent when it never
	// expires.
	ExpiresIn int64 `json:"expires_in,omitempty"`
	// Scope is the token's scopes, separated by spaces.
	Scope string `json:"scope"`
	// TokenID is the token's id (tok_…).
	TokenID string `json:"token_id"`
	// OutpostID is the outpost the token is limited to, if any.
	OutpostID string `json:"outpost_id,omitempty"`
}

// OAuthError is an error of DeviceCodePath and DeviceTokenPath.
type OAuthError struct {
	Error            string `json:"error"`
	ErrorDescription string `json:"error_description,omitempty"`
}

// DeviceDecisionRequest is the body of DeviceApprovePath and
// DeviceDenyPath.
type DeviceDecisionRequest struct {
	// UserCode is the code the client shows; case, spaces and dashes do
	// not matter.
	UserCode string `json:"user_code"`
}

// DeviceGrant is a grant as the approver sees it.
type DeviceGrant struct {
	UserCode   string `json:"user_code"`
	ClientID   string `json:"client_id"`
	ClientName string `json:"client_name"`
	// Scopes are those asked for; empty means the approver's own.
	Scopes []string `json:"scopes"`
	// Outpost is the outpost the token would be limited to, as asked.
	Outpost string `json:"outpost,omitempty"`
	// SourceIP is the address the request came from.
	SourceIP string `json:"source_ip"`
	// State is "pending", "approved", "denied" or "used".
	State string `json:"state"`
	// CreatedAt and ExpiresAt are Unix seconds.
	CreatedAt int64 `json:"created_at"`
	ExpiresAt int64 `json:"expires_at"`
	// ApprovedBy is the id of the token that approved or denied it.
	ApprovedBy string `json:"approved_by,omitempty"`
}
