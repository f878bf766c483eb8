// Package api holds every wire type of Outpost, the one place a JSON field
// name is spelled. The control plane, the CLI, workers, orchestrators and
// remotes all encode and decode these types, and so can a program outside
// this module: the package imports nothing of Outpost's internals. The Go
// SDK, package client, takes and returns them.
//
// What it holds:
//
//   - REST bodies of the control plane (/v1/...): outposts (Outpost,
//     CreateOutpostRequest), sessions (CreateSessionRequest, Session, Agent,
//     Step, Limits), their transcripts (Event, EventList, with the Event…
//     type names), artifacts, API tokens and scopes (Token, HasScope), the
//     connected workers (WorkerInfo, Worker), and the error envelope every
//     4xx and 5xx answer carries (ErrorResponse, the Code… constants).
//   - The fleet API, the same objects the public Outposts fleet API has:
//     queue entries (QueueEntry, QueueList), watch events (WatchEvent),
//     claims and releases (ClaimRequest), and the provisioning steps an
//     orchestrator reports (MachineEventRequest).
//   - The spawn contract between a claimer and the `outpost remote serve`
//     it starts: the environment variables it sets (SpawnEnv, EnvGatewayURL,
//     EnvConnectToken, EnvSessionID, …; each EnvVar has Outpost's name and
//     the public contract's), the worker's environment (WorkerEnv) and the
//     remote's exit status for a refused start (RemoteExitRejected).
//   - Tool arguments and results, one type per tool (ExecArgs, ExecResult,
//     ReadFileArgs, …), the Tool… names used by script steps, model tool
//     calls and MCP alike, the tool catalogue (Tools, ToolNames) whose
//     JSON schemas are generated from those same types, and how a call
//     reads to people (CallTarget, ResultSummary).
//   - Gateway frames, spoken over the WebSocket between the control plane
//     and a remote: Frame (JSON text messages, its Type one of the Frame…
//     constants) and the binary OutputFrame and ArtifactChunk, with the
//     protocol's Version.
//
// Timestamps on REST and fleet objects are Unix seconds, as the public fleet
// API has them; transcript events carry milliseconds (Event.Time, time_ms)
// and artifacts an RFC 3339 time. A pointer field is null when unset.
//
// Exported names are kept: fields and names are added, not renamed, so
// programs built on an older api keep decoding a newer server's answers
// (unknown JSON fields are ignored by encoding/json).
package api
