package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"

	"github.com/outpost-sh/outpost/api"
	"github.com/outpost-sh/outpost/client"
)

// Create a script session and follow its transcript until it ends. (Not
// run: it needs a server; TestSDKFromAnotherModule in test/e2e runs the
// same against a real one.)
func ExampleSessionsService_Follow() {
	ctx := context.Background()
	c, err := client.New("http://127.0.0.1:7420", os.Getenv("OUTPOST_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	args, _ := json.Marshal(api.ExecArgs{Command: "echo hello"})
	s, err := c.Sessions.Create(ctx, api.CreateSessionRequest{
		Outpost: "dev-boxes",
		Title:   "hello",
		Agent:   api.Agent{Kind: api.AgentScript, Steps: []api.Step{{Tool: api.ToolExec, Args: args}}},
	})
	if err != nil {
		log.Fatal(err)
	}
	err = c.Sessions.Follow(ctx, s.Metadata.SessionID, 0, func(ev api.Event) error {
		switch ev.Type {
		case api.EventOutput:
			fmt.Print(ev.Text)
		case api.EventEnd:
			fmt.Println("ended:", ev.Status, ev.StatusDetail, ev.Reason)
		}
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}

// Errors the server answered are a *client.Error; the Is… helpers test
// the answers callers branch on.
func ExampleIsNotFound() {
	c, err := client.New("http://127.0.0.1:7420", os.Getenv("OUTPOST_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.Sessions.Get(context.Background(), "ses_nope")
	switch {
	case client.IsNotFound(err):
		// Missing, or of another outpost than the token is limited to: the
		// server answers both alike.
		fmt.Println("no such session")
	case err != nil:
		log.Fatal(err)
	}
}
