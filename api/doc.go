// Package api holds every wire type of Outpost: the REST objects of the
// control plane and the fleet API, the gateway frames spoken between the
// control plane and a remote, and the arguments and results of the tools a
// remote runs. A JSON field name is spelled here and nowhere else.
//
// Timestamps on fleet objects are Unix seconds, as the public fleet API
// contract has them.
package api
