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
	CodeUnprocessable    = "unprocessable"
	CodeInternal         = "internal"
	CodeUnavailable      = "unavailable"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeTooManyRequests  = "too_many_requests"
	// CodeAcceptorInUse answers a heartbeat (409) whose acceptor id is
	// held by another live process (api.WorkerInfo.Instance).
	CodeAcceptorInUse = "acceptor_in_use"
	// CodeOutpostAtCapacity answers a claim (409) of a pending session
	// whose outpost already holds its max_running claims: the session
	// waits in the queue until one of them ends. Claimers should wait for
	// a change of the queue (or back off) before claiming again.
	CodeOutpostAtCapacity = "outpost_at_capacity"
)

// ErrorResponse is the body of every 4xx and 5xx answer:
// {"error":{"code":…,"message":…},"detail":…}. Detail repeats the message
// at the top level, the shape the public fleet API answers
// ({"detail":"Session is already claimed"}), so clients written for it
// read Outpost's errors too.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
	// Detail is Error.Message again.
	Detail string `json:"detail"`
}

// ErrorBody says what went wrong: a stable machine code and a sentence for
// people.
type ErrorBody struct {
	// Code is one of the Code… constants.
	Code string `json:"code"`
	// Message is a whole sentence that says what went wrong.
	Message string `json:"message"`
}

// NewErrorResponse is the error body of code and message, with the message
// in both places.
func NewErrorResponse(code, message string) ErrorResponse {
	return ErrorResponse{Error: ErrorBody{Code: code, Message: message}, Detail: message}
}
