package server

import (
	"net/http"

	"github.com/outpost-sh/outpost/api"
)

// gatewaySession tells the holder of a connect token what it needs of its
// session before it starts the remote (GET api.GatewaySessionPath): the
// remote build the queue entry pins. A direct-serve worker holds nothing
// but the connect token, and a claimer written for the public contract
// need not pass it the pin. The token names the session, so no other
// session's entry can be read with it; a token whose claim lapsed or moved
// reads nothing.
func (s *Server) gatewaySession(w http.ResponseWriter, r *http.Request) error {
	ct, e, err := s.connectClaim(r.Context(), r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.GatewaySession{SessionID: ct.SessionID, RemoteBinarySHA: strPtr(e.RemoteBinarySHA)})
	return nil
}
