//! Dev mode: with no JWT key configured the gateway makes its own secret
//! and API key, signs a demo token, writes the three under the data
//! directory (`dev-api-key`, `dev-token`, `dev-jwt-secret`: what the
//! backend examples read, docs/examples.md) and prints a ready URL.

use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::app::DevCredentials;
use crate::auth::{Claims, Verifier, sign_hs256};

/// The name of the dev API key (in logs and metrics): every operation,
/// every site, no rate limit.
pub const API_KEY_NAME: &str = "dev";

/// How long the demo token stays valid.
const DEMO_TOKEN_DAYS: u64 = 30;

fn random_hex(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

/// Make a secret, a verifier for it, an API key and a demo token.
pub fn credentials(leeway_secs: u64) -> (Verifier, DevCredentials) {
    let secret = random_hex(32);
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
        + DEMO_TOKEN_DAYS * 24 * 3600;
    let token = sign_hs256(
        secret.as_bytes(),
        &Claims {
            sub: "demo".into(),
            client: Some("demo-co".into()),
            site: None,
            exp,
        },
    );
    (
        Verifier::hs256(secret.as_bytes(), leeway_secs),
        DevCredentials {
            api_key: random_hex(16),
            token,
            jwt_secret: secret,
        },
    )
}

/// Write the credentials to `dir` (created if missing), readable by the
/// owner only.
pub fn write_files(dir: &Path, creds: &DevCredentials) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, value) in [
        ("dev-api-key", &creds.api_key),
        ("dev-token", &creds.token),
        ("dev-jwt-secret", &creds.jwt_secret),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, value)?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    Ok(())
}

/// The banner printed at start in dev mode.
pub fn banner(addr: SocketAddr, dir: &Path, creds: &DevCredentials) -> String {
    format!(
        "\n  Herald is running in dev mode (no JWT key configured).\n\
         \n  Demo page:   http://{addr}/?token={token}&key={key}\
         \n  Console:     http://{addr}/console  (sign in with the API key)\
         \n  WebSocket:   ws://{addr}/ws  (STOMP; passcode = the token)\
         \n  API key:     {key}   (also in {dir}/dev-api-key)\
         \n  Demo token:  user \"demo\", client \"demo-co\"   (also in {dir}/dev-token)\
         \n  JWT secret:  in {dir}/dev-jwt-secret  (HS256: a backend signs its users' tokens with it)\
         \n\n  Publish to the demo user:\
         \n    curl -s -X POST http://{addr}/v1/notifications \\\
         \n      -H \"Authorization: Bearer $(cat {dir}/dev-api-key)\" -H 'Content-Type: application/json' \\\
         \n      -d '{{\"users\":[\"demo\"],\"event\":\"demo.hello\",\"payload\":{{\"text\":\"Hello from Herald\"}}}}'\n",
        token = creds.token,
        key = creds.api_key,
        dir = dir.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_token_verifies_as_the_demo_user() {
        let (verifier, creds) = credentials(0);
        let who = verifier.verify(&creds.token).unwrap().who;
        assert_eq!(&*who.user, "demo");
        assert_eq!(who.client.as_deref(), Some("demo-co"));
        assert_eq!(creds.api_key.len(), 32);
    }

    #[test]
    fn the_banner_prints_the_console_url() {
        let (_, creds) = credentials(0);
        let addr: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let text = banner(addr, Path::new("herald-data"), &creds);
        assert!(
            text.contains("Console:     http://127.0.0.1:8080/console"),
            "{text}"
        );
    }

    #[test]
    fn files_are_written_owner_only() {
        let dir = std::env::temp_dir().join(format!("herald-dev-{}", random_hex(4)));
        let (_, creds) = credentials(0);
        write_files(&dir, &creds).unwrap();
        let key = std::fs::read_to_string(dir.join("dev-api-key")).unwrap();
        assert_eq!(key, creds.api_key);
        // The secret the examples sign their tokens with verifies the
        // gateway's own demo token.
        let secret = std::fs::read_to_string(dir.join("dev-jwt-secret")).unwrap();
        let who = Verifier::hs256(secret.as_bytes(), 0)
            .verify(&creds.token)
            .unwrap()
            .who;
        assert_eq!(&*who.user, "demo");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            for name in ["dev-api-key", "dev-token", "dev-jwt-secret"] {
                let mode = std::fs::metadata(dir.join(name))
                    .unwrap()
                    .permissions()
                    .mode();
                assert_eq!(mode & 0o777, 0o600, "{name}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
