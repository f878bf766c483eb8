package api_test

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/outpost-sh/outpost/api"
)

// A script session: two tool calls, run in order on a machine of the
// outpost, with an environment variable and a secret for its tools.
func ExampleCreateSessionRequest() {
	args, _ := json.Marshal(api.ExecArgs{Command: `echo "hello from $GREETER"`})
	req := api.CreateSessionRequest{
		Outpost: "dev-boxes",
		Title:   "hello",
		Agent: api.Agent{
			Kind: api.AgentScript,
			Steps: []api.Step{
				{Tool: api.ToolExec, Args: args},
				{Tool: api.ToolWriteFile, Args: json.RawMessage(`{"path":"out.txt","content":"done\n"}`)},
			},
		},
		Env:     map[string]string{"GREETER": "outpost"},
		Secrets: map[string]string{"API_KEY": "s3cret"},
		Limits:  api.Limits{MaxDurationS: 600},
	}
	body, err := json.MarshalIndent(req, "", "  ")
	if err != nil {
		panic(err)
	}
	fmt.Println(string(body))
	// Output:
	// {
	//   "outpost": "dev-boxes",
	//   "title": "hello",
	//   "prompt": "",
	//   "repos": null,
	//   "agent": {
	//     "kind": "script",
	//     "steps": [
	//       {
	//         "tool": "exec",
	//         "args": {
	//           "command": "echo \"hello from $GREETER\""
	//         }
	//       },
	//       {
	//         "tool": "write_file",
	//         "args": {
	//           "path": "out.txt",
	//           "content": "done\n"
	//         }
	//       }
	//     ]
	//   },
	//   "env": {
	//     "GREETER": "outpost"
	//   },
	//   "secrets": {
	//     "API_KEY": "s3cret"
	//   },
	//   "limits": {
	//     "max_duration_s": 600
	//   }
	// }
}

// Transcript events arrive as JSON, one per `data:` line of the event
// stream or as items of GET /v1/sessions/{id}/events. Type says which
// fields are set.
func ExampleUnmarshalEvent() {
	lines := []string{
		`{"seq":3,"session_id":"ses_1","time_ms":1700000000000,"type":"call","call_seq":1,"tool":"exec","args":{"command":"echo hi"}}`,
		`{"seq":4,"session_id":"ses_1","time_ms":1700000000010,"type":"output","call_seq":1,"stream":"stdout","text":"hi\n"}`,
		`{"seq":5,"session_id":"ses_1","time_ms":1700000000020,"type":"result","call_seq":1,"ok":true,"exit_code":0,"value":{"exit_code":0,"duration_ms":4,"output_bytes":3}}`,
		`{"seq":6,"session_id":"ses_1","time_ms":1700000000030,"type":"status","status":"exit","status_detail":"finished","reason":"The script finished."}`,
	}
	for _, line := range lines {
		var ev api.Event
		if err := api.UnmarshalEvent([]byte(line), &ev); err != nil {
			panic(err)
		}
		switch ev.Type {
		case api.EventCall:
			fmt.Printf("%d call %d: %s %s\n", ev.Seq, ev.CallSeq, ev.Tool, ev.Args)
		case api.EventOutput:
			fmt.Printf("%d output %d (%s): %q\n", ev.Seq, ev.CallSeq, ev.Stream, ev.Text)
		case api.EventResult:
			var res api.ExecResult
			if err := json.Unmarshal(ev.Value, &res); err != nil {
				panic(err)
			}
			fmt.Printf("%d result %d: ok=%t exit=%d\n", ev.Seq, ev.CallSeq, *ev.OK, res.ExitCode)
		case api.EventStatus:
			fmt.Printf("%d status %s/%s final=%t: %s\n", ev.Seq, ev.Status, ev.StatusDetail, api.IsFinal(ev.Status), ev.Reason)
		}
	}
	// Output:
	// 3 call 1: exec {"command":"echo hi"}
	// 4 output 1 (stdout): "hi\n"
	// 5 result 1: ok=true exit=0
	// 6 status exit/finished final=true: The script finished.
}

// A claimer starts `outpost remote serve` with the spawn contract's
// variables, taken from its claim's answer, in an otherwise clean
// environment; the remote reads either name of each.
func ExampleSpawnEnv() {
	claim := api.QueueEntry{
		Metadata: api.QueueMetadata{SessionID: "ses_1"},
		Status:   api.QueueStatus{ConnectToken: "opc_secret", GatewayURL: "wss://outpost.example.com/v1/gateway"},
	}
	env := []string{
		api.EnvGatewayURL.Name + "=" + claim.Status.GatewayURL,
		api.EnvConnectToken.Name + "=" + claim.Status.ConnectToken,
		api.EnvSessionID.Name + "=" + claim.Metadata.SessionID,
		api.EnvStateDir.Name + "=" + "/var/lib/outpost/state/ses_1",
	}
	fmt.Println(strings.Join(env, "\n"))

	// The remote's side: the public contract's name works too.
	getenv := func(name string) string {
		return map[string]string{"DEVIN_OUTPOST_SESSION_ID": "ses_1"}[name]
	}
	id, from := api.EnvSessionID.Lookup(getenv)
	fmt.Printf("session %s from %s\n", id, from)
	for _, v := range api.SpawnEnv[:3] {
		fmt.Println("required:", v)
	}
	// Output:
	// OUTPOST_GATEWAY_URL=wss://outpost.example.com/v1/gateway
	// OUTPOST_CONNECT_TOKEN=opc_secret
	// OUTPOST_SESSION_ID=ses_1
	// OUTPOST_STATE_DIR=/var/lib/outpost/state/ses_1
	// session ses_1 from DEVIN_OUTPOST_SESSION_ID
	// required: OUTPOST_GATEWAY_URL (or DEVIN_OUTPOST_GATEWAY_URL)
	// required: OUTPOST_CONNECT_TOKEN (or DEVIN_OUTPOST_CONNECT_TOKEN)
	// required: OUTPOST_SESSION_ID (or DEVIN_OUTPOST_SESSION_ID)
}

// Scopes imply others: a worker needs outposts.machine, which an
// orchestrator token holds too.
func ExampleHasScope() {
	orchestrator := []string{api.ScopeOrchestrator}
	fmt.Println(api.HasScope(orchestrator, api.ScopeMachine))
	fmt.Println(api.HasScope(orchestrator, api.ScopeSessionsRead))
	fmt.Println(api.HasScope([]string{api.ScopeSessionsWrite}, api.ScopeSessionsRead))
	// Output:
	// true
	// false
	// true
}

// Every 4xx and 5xx answer carries the same envelope.
func ExampleErrorResponse() {
	body := `{"error":{"code":"not_found","message":"Session ses_nope does not exist."},"detail":"Session ses_nope does not exist."}`
	var e api.ErrorResponse
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		panic(err)
	}
	fmt.Println(e.Error.Code == api.CodeNotFound, e.Error.Message)
	// Output:
	// true Session ses_nope does not exist.
}

// Tool arguments are the JSON of a Go type per tool; NewToolArgs gives
// that type for a tool name, which is how the remote decodes a call.
func ExampleNewToolArgs() {
	args, ok := api.NewToolArgs(api.ToolExec)
	if !ok {
		panic("no exec tool")
	}
	if err := json.Unmarshal([]byte(`{"argv":["ls","-l"],"timeout_s":30}`), args); err != nil {
		panic(err)
	}
	exec := args.(*api.ExecArgs)
	fmt.Println(exec.Argv, exec.TimeoutS)
	// Output:
	// [ls -l] 30
}
