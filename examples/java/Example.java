// Herald from a Java backend: mint a browser token, publish, schedule, read, cancel.
//
//   HERALD_URL=http://127.0.0.1:8080 HERALD_API_KEY=... HERALD_JWT_SECRET=... java Example.java
//
// JDK 17 or newer, no dependencies (java.net.http, javax.crypto). Each step
// prints its HTTP status and Herald's JSON answer.

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.Base64;
import java.util.UUID;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

public class Example {
    static final String URL = env("HERALD_URL", "http://127.0.0.1:8080");
    static final String API_KEY = env("HERALD_API_KEY", null);
    static final String SECRET = env("HERALD_JWT_SECRET", null);
    static final String USER = env("HERALD_USER", "alice");
    static final HttpClient HTTP = HttpClient.newHttpClient();

    public static void main(String[] args) throws Exception {
        System.out.println("token " + mintToken(USER));

        // Now, to one user. The id is the idempotency key: a retry is not delivered twice.
        String welcome = "welcome-" + UUID.randomUUID();
        call("publish", "POST", "/v1/notifications", 202, "{\"id\":" + json(welcome)
                + ",\"users\":[" + json(USER) + "],\"event\":\"account.welcome\""
                + ",\"payload\":{\"text\":\"Welcome to Herald\"}}");

        // In ten minutes, stored durably until then.
        String reminder = "reminder-" + UUID.randomUUID();
        call("schedule", "POST", "/v1/notifications", 202, "{\"id\":" + json(reminder)
                + ",\"users\":[" + json(USER) + "],\"event\":\"meeting.reminder\""
                + ",\"payload\":{\"meeting\":42},\"delay_ms\":600000}");

        call("status", "GET", "/v1/notifications/" + reminder, 200, null); // "state": "scheduled"
        // 409 too_late once it is claimed for firing:
        call("cancel", "DELETE", "/v1/notifications/" + reminder, 200, null);
    }

    // The browser's token: HS256 with the gateway's secret. sub is the user;
    // add "client" and "site" claims for client scope and sites.
    static String mintToken(String sub) throws Exception {
        Base64.Encoder b64 = Base64.getUrlEncoder().withoutPadding();
        long exp = Instant.now().getEpochSecond() + 3600;
        String header = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
        String claims = "{\"sub\":" + json(sub) + ",\"exp\":" + exp + "}";
        String input = b64.encodeToString(header.getBytes(StandardCharsets.UTF_8)) + "."
                + b64.encodeToString(claims.getBytes(StandardCharsets.UTF_8));
        Mac mac = Mac.getInstance("HmacSHA256");
        mac.init(new SecretKeySpec(SECRET.getBytes(StandardCharsets.UTF_8), "HmacSHA256"));
        byte[] signature = mac.doFinal(input.getBytes(StandardCharsets.US_ASCII));
        return input + "." + b64.encodeToString(signature);
    }

    static void call(String step, String method, String path, int expect, String body)
            throws Exception {
        HttpRequest request = HttpRequest.newBuilder(URI.create(URL + path))
                .timeout(Duration.ofSeconds(10))
                .header("Authorization", "Bearer " + API_KEY)
                .header("Content-Type", "application/json")
                .method(method, body == null ? HttpRequest.BodyPublishers.noBody()
                        : HttpRequest.BodyPublishers.ofString(body))
                .build();
        HttpResponse<String> response = HTTP.send(request, HttpResponse.BodyHandlers.ofString());
        System.out.println(step + " " + response.statusCode() + " " + response.body());
        if (response.statusCode() != expect) {
            throw new IllegalStateException(step + ": expected " + expect);
        }
    }

    // A JSON string literal (the JDK has no JSON library; use yours).
    static String json(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }

    static String env(String name, String fallback) {
        String value = System.getenv(name);
        if (value != null && !value.isEmpty()) {
            return value;
        }
        if (fallback == null) {
            System.err.println("set " + name);
            System.exit(2);
        }
        return fallback;
    }
}
