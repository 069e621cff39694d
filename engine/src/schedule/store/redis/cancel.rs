//! Cancelling one entry.

use super::RedisStore;
use super::layout::{self, score};
use super::reply::{array, blob, int, num, text, unexpected};
use crate::schedule::entry::Millis;
use crate::schedule::store::{Cancel, StoreError};

impl RedisStore {
    pub(super) async fn cancel_one(&self, id: &str, now: Millis) -> Result<Cancel, StoreError> {
        let s = self.keys.shard(id);
        let args = vec![id.as_bytes().to_vec(), num(score(now))];
        let answer = array(self.run(&self.scripts.cancel, s, args).await?)?;
        let mut it = answer.into_iter();
        let outcome = it.next().map(|v| int(&v)).transpose()?.unwrap_or(0);
        if outcome == 0 {
            return Ok(Cancel::NotFound);
        }
        let (Some(h), Some(user), Some(tokens)) = (it.next(), it.next(), it.next()) else {
            return Err(unexpected("cancel"));
        };
        let status = layout::status(id, &blob(h)?)?;
        let user = text(user)?;
        let tokens = array(tokens)?
            .into_iter()
            .map(|t| text(t).map(|t| format!("{s}:{t}")))
            .collect::<Result<Vec<_>, _>>()?;
        if !user.is_empty() {
            self.unhint(&user, tokens).await?;
        }
        Ok(if outcome == 1 {
            Cancel::Cancelled(status)
        } else {
            Cancel::TooLate(status)
        })
    }
}
