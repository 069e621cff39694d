// Herald from a Go backend: mint a browser token, publish, schedule, read, cancel.
//
//	HERALD_URL=http://127.0.0.1:8080 HERALD_API_KEY=... HERALD_JWT_SECRET=... go run main.go
//
// Standard library only (Go 1.19 or newer, no modules). Each step prints its
// HTTP status and Herald's JSON answer.
package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"time"
)

var (
	baseURL = env("HERALD_URL", "http://127.0.0.1:8080")
	apiKey  = must("HERALD_API_KEY")
	secret  = must("HERALD_JWT_SECRET")
	user    = env("HERALD_USER", "alice")
)

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func must(name string) string {
	v := os.Getenv(name)
	if v == "" {
		log.Fatalf("set %s", name)
	}
	return v
}

// mintToken signs an HS256 JWT with the gateway's secret. sub is the user;
// add "client" and "site" claims for client scope and sites.
func mintToken(sub string) string {
	b64 := base64.RawURLEncoding.EncodeToString
	header, _ := json.Marshal(map[string]string{"alg": "HS256", "typ": "JWT"})
	claims, _ := json.Marshal(map[string]any{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
	signingInput := b64(header) + "." + b64(claims)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(signingInput))
	return signingInput + "." + b64(mac.Sum(nil))
}

func call(step, method, path string, expect int, body any) {
	var reader io.Reader
	if body != nil {
		data, _ := json.Marshal(body)
		reader = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, baseURL+path, reader)
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	res, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer res.Body.Close()
	answer, _ := io.ReadAll(res.Body)
	fmt.Println(step, res.StatusCode, string(answer))
	if res.StatusCode != expect {
		log.Fatalf("%s: expected %d", step, expect)
	}
}

func randomID(prefix string) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		log.Fatal(err)
	}
	return prefix + "-" + hex.EncodeToString(b)
}

type object = map[string]any

func main() {
	fmt.Println("token", mintToken(user))

	// Now, to one user. The id is the idempotency key: a retry is not delivered twice.
	call("publish", "POST", "/v1/notifications", 202, object{
		"id": randomID("welcome"), "users": []string{user}, "event": "account.welcome",
		"payload": object{"text": "Welcome to Herald"}})

	// In ten minutes, stored durably until then.
	reminder := randomID("reminder")
	call("schedule", "POST", "/v1/notifications", 202, object{
		"id": reminder, "users": []string{user}, "event": "meeting.reminder",
		"payload": object{"meeting": 42}, "delay_ms": 600000})

	call("status", "GET", "/v1/notifications/"+reminder, 200, nil)    // "state": "scheduled"
	call("cancel", "DELETE", "/v1/notifications/"+reminder, 200, nil) // 409 too_late once firing
}
