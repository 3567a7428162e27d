//! [`CurveStore`] for [`PostgresStore`]: `curve.sql`.

use super::reply::Reply;
use super::{Params, PostgresKey, PostgresStore, StatementName};
use crate::error::LimiterError;
use crate::limiter::LimiterFuture;
use crate::store::curve::CURVE_TTL;
use crate::store::late::Late;
use crate::store::{CurveRecord, CurveStore, StoreError};

impl PostgresStore {
    /// Runs `op` of the curve function with `args`; its reply.
    fn curve_op(
        &self,
        key: &PostgresKey,
        op: &'static str,
        args: Vec<i64>,
    ) -> LimiterFuture<'static, Result<Vec<i64>, LimiterError>> {
        let params: Params = vec![Box::new(op), Box::new(key.name.clone()), Box::new(args)];
        let read = |reply: Reply<'_>| Ok(reply.0.to_vec());
        self.run(StatementName::Curve, params, read, Late::Drop)
    }
}

impl CurveStore for PostgresStore {
    type CurveKey = PostgresKey;

    fn curve_key(&self, name: &str) -> PostgresKey {
        PostgresKey {
            name: self.key_name(name),
        }
    }

    fn load_curve<'a>(
        &'a self,
        key: &'a PostgresKey,
    ) -> LimiterFuture<'a, Result<Option<CurveRecord>, LimiterError>> {
        let load = self.curve_op(key, "load", Vec::new());
        LimiterFuture::new(async move {
            let reply = load.await?;
            CurveRecord::from_reply(&reply)
                .map_err(|error| StoreError::bad_reply(super::BACKEND, error).into())
        })
    }

    fn swap_curve<'a>(
        &'a self,
        key: &'a PostgresKey,
        record: CurveRecord,
    ) -> LimiterFuture<'a, Result<bool, LimiterError>> {
        let mut args = record.to_args().to_vec();
        args.push(i64::try_from(CURVE_TTL.as_micros()).unwrap_or(i64::MAX));
        let swap = self.curve_op(key, "swap", args);
        LimiterFuture::new(async move { Ok(swap.await? == [1]) })
    }
}
