"""Publishing to Herald over AMQP with pika: to a user, delayed, cancelled.

    pip install -r requirements.txt
    HERALD_AMQP_URL=amqp://guest:guest@127.0.0.1:5672/%2f \
    HERALD_URL=http://127.0.0.1:8090 HERALD_API_KEY=... python publish.py

Publishes to the exchange `herald` (HERALD_AMQP_EXCHANGE) of a root broker,
with publisher confirms. AMQP gives no answer beyond the broker's confirm:
the delayed notification's status is read from a router's HTTP API
(HERALD_URL, a key with the `status` operation). Prints each step.
"""

import json
import os
import time
import uuid

import pika
import requests

AMQP_URL = os.environ.get("HERALD_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
EXCHANGE = os.environ.get("HERALD_AMQP_EXCHANGE", "herald")
URL = os.environ.get("HERALD_URL", "http://127.0.0.1:8090")
API_KEY = os.environ["HERALD_API_KEY"]
USER = os.environ.get("HERALD_USER", "alice")


def wait_status(nid, state):
    """Print the router's status of `nid` once its state is `state` (10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        r = requests.get(f"{URL}/v1/notifications/{nid}",
                         headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10)
        if r.status_code == 200 and r.json()["state"] == state:
            print("status", r.status_code, r.text)
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"status {r.status_code} {r.text}: expected {state}")
        time.sleep(0.1)  # the router stores what it consumes: ask again


conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
channel = conn.channel()
channel.confirm_delivery()  # basic_publish raises unless the broker confirms

# Now, to one user. message_id is the idempotency key: set it.
welcome = f"welcome-{uuid.uuid4()}"
channel.basic_publish(
    exchange=EXCHANGE, routing_key="account.welcome",
    body=json.dumps({"text": "Welcome to Herald"}).encode(),
    properties=pika.BasicProperties(
        message_id=welcome, content_type="application/json", delivery_mode=2,
        headers={"users": [USER], "event": "account.welcome"}))  # users: a list of str
print("publish confirmed", welcome)

# In ten minutes (delay-ms: an int), stored durably by the router until then.
reminder = f"reminder-{uuid.uuid4()}"
channel.basic_publish(
    exchange=EXCHANGE, routing_key="meeting.reminder",
    body=json.dumps({"meeting": 42}).encode(),
    properties=pika.BasicProperties(
        message_id=reminder, content_type="application/json", delivery_mode=2,
        headers={"users": [USER], "event": "meeting.reminder", "delay-ms": 600_000}))
print("schedule confirmed", reminder)
# The broker's confirm says the broker has it; the router's status says the
# router accepted it (a refused one would be dead-lettered instead).
wait_status(reminder, "scheduled")

# Cancel: type herald.cancel, message_id the notification's; the body is ignored.
channel.basic_publish(
    exchange=EXCHANGE, routing_key="cancel", body=b"",
    properties=pika.BasicProperties(message_id=reminder, type="herald.cancel", delivery_mode=2))
print("cancel confirmed", reminder)
wait_status(reminder, "cancelled")  # a cancel after the claim is too late: delivered
conn.close()
