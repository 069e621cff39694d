"""Herald from a Python backend: mint a browser token, publish, schedule, read, cancel.

    pip install -r requirements.txt
    HERALD_URL=http://127.0.0.1:8080 HERALD_API_KEY=... HERALD_JWT_SECRET=... python example.py

Each step prints its HTTP status and Herald's JSON answer.
"""

import os
import time
import uuid

import jwt  # PyJWT
import requests

URL = os.environ.get("HERALD_URL", "http://127.0.0.1:8080")
API_KEY = os.environ["HERALD_API_KEY"]
SECRET = os.environ["HERALD_JWT_SECRET"]
USER = os.environ.get("HERALD_USER", "alice")
api = requests.Session()
api.headers["Authorization"] = f"Bearer {API_KEY}"


def call(step, method, path, expect, **kwargs):
    r = api.request(method, URL + path, timeout=10, **kwargs)
    print(step, r.status_code, r.text)
    if r.status_code != expect:
        raise SystemExit(f"{step}: expected {expect}")


# The browser's token: HS256 with the gateway's secret. sub is the user; add
# "client" and "site" claims for client scope and sites.
token = jwt.encode({"sub": USER, "exp": int(time.time()) + 3600}, SECRET, algorithm="HS256")
print("token", token)

# Now, to one user. The id is the idempotency key: a retry is not delivered twice.
call("publish", "POST", "/v1/notifications", 202, json={
    "id": f"welcome-{uuid.uuid4()}", "users": [USER], "event": "account.welcome",
    "payload": {"text": "Welcome to Herald"}})

# In ten minutes, stored durably until then.
reminder = f"reminder-{uuid.uuid4()}"
call("schedule", "POST", "/v1/notifications", 202, json={
    "id": reminder, "users": [USER], "event": "meeting.reminder",
    "payload": {"meeting": 42}, "delay_ms": 600_000})

call("status", "GET", f"/v1/notifications/{reminder}", 200)  # "state": "scheduled"
call("cancel", "DELETE", f"/v1/notifications/{reminder}", 200)  # 409 too_late once firing
