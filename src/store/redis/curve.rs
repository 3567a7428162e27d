//! [`CurveStore`] for [`RedisStore`]: `curve.lua`.

use super::{RedisKey, RedisStore, ScriptName};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::store::curve::CURVE_TTL;
use crate::store::late::Late;
use crate::store::{CurveRecord, CurveStore, StoreError};

impl RedisStore {
    /// Runs `op` of the curve script with `arguments`, and reads the reply
    /// with `parse`.
    fn curve_op<T: Send + 'static>(
        &self,
        key: &RedisKey,
        op: &'static str,
        arguments: Vec<String>,
        parse: impl FnOnce(&[i64]) -> Result<T, StoreError> + Send + 'static,
    ) -> LimiterFuture<'static, Result<T, LimiterError>> {
        let mut all = vec![op.to_owned()];
        all.extend(arguments);
        self.run(ScriptName::Curve, &key.parts, all, parse, Late::Drop)
    }
}

impl CurveStore for RedisStore {
    type CurveKey = RedisKey;

    fn curve_key(&self, name: &str) -> RedisKey {
        RedisKey::new(&self.base_key(name), &["curve"])
    }

    fn load_curve<'a>(
        &'a self,
        key: &'a RedisKey,
    ) -> LimiterFuture<'a, Result<Option<CurveRecord>, LimiterError>> {
        self.curve_op(key, "load", Vec::new(), |reply| {
            CurveRecord::from_reply(reply)
                .map_err(|error| StoreError::bad_reply(super::BACKEND, error))
        })
    }

    fn swap_curve<'a>(
        &'a self,
        key: &'a RedisKey,
        record: CurveRecord,
    ) -> LimiterFuture<'a, Result<bool, LimiterError>> {
        let mut arguments: Vec<String> = record.to_args().iter().map(i64::to_string).collect();
        arguments.push(CURVE_TTL.as_millis().to_string());
        self.curve_op(key, "swap", arguments, |reply| Ok(reply == [1]))
    }
}
