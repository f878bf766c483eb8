package api

// Error codes used in ErrorBody.Code.
const (
	CodeBadRequest       = "bad_request"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeNotFound         = "not_found"
	CodeConflict         = "conflict"
	CodeGone             = "gone"
	CodeTooLarge         = "request_too_large"
	CodeInternal         = "internal"
	CodeUnavailable      = "unavailable"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeTooManyRequests  = "too_many_requests"
)

// ErrorResponse is the body of every 4xx and 5xx answer:
// {"error":{"code":…,"message":…}}.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody says what went wrong: a stable machine code and a sentence for
// people.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
