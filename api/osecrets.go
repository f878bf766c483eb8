package api

// OutpostSecret is a stored secret of an outpost, as the API shows it:
// its name and when it was set, never its value. A session of the outpost
// names it in CreateSessionRequest.UseSecrets to have the value among its
// own secrets.
type OutpostSecret struct {
	// Name is the environment variable the value becomes.
	Name string `json:"name"`
	// Outpost is the outpost's name.
	Outpost string `json:"outpost"`
	// CreatedAt and UpdatedAt are Unix seconds: when the secret was first
	// stored and when its value was last set.
	CreatedAt int64 `json:"created_at"`
	UpdatedAt int64 `json:"updated_at"`
}

// OutpostSecretList is the answer of GET /v1/outposts/{outpost}/secrets,
// ordered by name.
type OutpostSecretList struct {
	Items []OutpostSecret `json:"items"`
}

// PutOutpostSecretRequest is the body of PUT
// /v1/outposts/{outpost}/secrets/{name}.
type PutOutpostSecretRequest struct {
	// Value is the secret: not empty, at most 64 KiB, no NUL byte (as a
	// session's secrets).
	Value string `json:"value"`
}
