<?php
// Herald from a PHP backend: mint a browser token, publish, schedule, read, cancel.
//
//   HERALD_URL=http://127.0.0.1:8080 HERALD_API_KEY=... HERALD_JWT_SECRET=... php example.php
//
// PHP 8 with the curl extension (Debian: php-cli php-curl). Each step prints
// its HTTP status and Herald's JSON answer.

function env(string $name, ?string $default = null): string
{
    $value = getenv($name);
    if ($value !== false && $value !== '') {
        return $value;
    }
    if ($default === null) {
        fwrite(STDERR, "set $name\n");
        exit(2);
    }
    return $default;
}

$url = env('HERALD_URL', 'http://127.0.0.1:8080');
$apiKey = env('HERALD_API_KEY');
$secret = env('HERALD_JWT_SECRET');
$user = env('HERALD_USER', 'alice');

function b64url(string $data): string
{
    return rtrim(strtr(base64_encode($data), '+/', '-_'), '=');
}

// The browser's token: HS256 with the gateway's secret. sub is the user; add
// "client" and "site" claims for client scope and sites.
function mint_token(string $secret, string $sub): string
{
    $input = b64url(json_encode(['alg' => 'HS256', 'typ' => 'JWT'])) . '.'
        . b64url(json_encode(['sub' => $sub, 'exp' => time() + 3600]));
    return $input . '.' . b64url(hash_hmac('sha256', $input, $secret, true));
}

function call(string $step, string $method, string $path, int $expect, ?array $body = null): void
{
    global $url, $apiKey;
    $ch = curl_init($url . $path);
    curl_setopt_array($ch, [
        CURLOPT_CUSTOMREQUEST => $method,
        CURLOPT_HTTPHEADER => ["Authorization: Bearer $apiKey", 'Content-Type: application/json'],
        CURLOPT_RETURNTRANSFER => true,
        CURLOPT_TIMEOUT => 10,
    ]);
    if ($body !== null) {
        curl_setopt($ch, CURLOPT_POSTFIELDS, json_encode($body));
    }
    $answer = curl_exec($ch);
    if ($answer === false) {
        fwrite(STDERR, "$step: " . curl_error($ch) . "\n");
        exit(1);
    }
    $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
    echo "$step $status $answer\n";
    if ($status !== $expect) {
        fwrite(STDERR, "$step: expected $expect\n");
        exit(1);
    }
}

echo 'token ', mint_token($secret, $user), "\n";

// Now, to one user. The id is the idempotency key: a retry is not delivered twice.
call('publish', 'POST', '/v1/notifications', 202, [
    'id' => 'welcome-' . bin2hex(random_bytes(16)), 'users' => [$user],
    'event' => 'account.welcome', 'payload' => ['text' => 'Welcome to Herald']]);

// In ten minutes, stored durably until then.
$reminder = 'reminder-' . bin2hex(random_bytes(16));
call('schedule', 'POST', '/v1/notifications', 202, [
    'id' => $reminder, 'users' => [$user], 'event' => 'meeting.reminder',
    'payload' => ['meeting' => 42], 'delay_ms' => 600000]);

call('status', 'GET', "/v1/notifications/$reminder", 200);    // "state": "scheduled"
call('cancel', 'DELETE', "/v1/notifications/$reminder", 200); // 409 too_late once firing
