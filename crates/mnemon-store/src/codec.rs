//! Codecs that let a durable store persist in-process objects.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use mnemon_types::Object;

/// What a codec reports when it cannot encode or decode a value.
pub type CodecError = Box<dyn std::error::Error + Send + Sync>;

/// Turns objects of one type into bytes and back, so a durable store can keep them.
///
/// ```
/// use mnemon_store::{CodecError, ObjectCodec};
/// use mnemon_types::{AssetObject, Object};
///
/// #[derive(Debug)]
/// struct Celsius(f64);
/// impl AssetObject for Celsius {
///     fn type_name(&self) -> &str { "demo::Celsius" }
///     fn as_any(&self) -> &dyn std::any::Any { self }
/// }
///
/// struct CelsiusCodec;
/// impl ObjectCodec for CelsiusCodec {
///     fn type_name(&self) -> &str { "demo::Celsius" }
///     fn encode(&self, object: &Object) -> Result<Vec<u8>, CodecError> {
///         let c = object.downcast_ref::<Celsius>().ok_or("not a Celsius")?;
///         Ok(c.0.to_le_bytes().to_vec())
///     }
///     fn decode(&self, data: &[u8]) -> Result<Object, CodecError> {
///         let bytes: [u8; 8] = data.try_into()?;
///         Ok(Object::new(Celsius(f64::from_le_bytes(bytes))))
///     }
/// }
/// ```
pub trait ObjectCodec: Send + Sync {
    /// The [`AssetObject::type_name`](mnemon_types::AssetObject::type_name) this codec handles.
    fn type_name(&self) -> &str;

    /// The object as bytes.
    fn encode(&self, object: &Object) -> Result<Vec<u8>, CodecError>;

    /// The object back from bytes written by [`encode`](Self::encode).
    fn decode(&self, data: &[u8]) -> Result<Object, CodecError>;
}

/// The codecs a store knows, keyed by type name.
#[derive(Clone, Default)]
pub struct CodecRegistry {
    codecs: BTreeMap<String, Arc<dyn ObjectCodec>>,
}

impl CodecRegistry {
    /// A registry with no codecs: objects are rejected.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `codec`, replacing any codec for the same type name.
    pub fn register(&mut self, codec: impl ObjectCodec + 'static) -> &mut Self {
        self.codecs
            .insert(codec.type_name().to_owned(), Arc::new(codec));
        self
    }

    /// This registry with `codec` added (builder form of [`register`](Self::register)).
    pub fn with(mut self, codec: impl ObjectCodec + 'static) -> Self {
        self.register(codec);
        self
    }

    /// The codec for `type_name`, if one is registered.
    pub fn get(&self, type_name: &str) -> Option<&dyn ObjectCodec> {
        self.codecs.get(type_name).map(|c| c.as_ref())
    }
}

impl fmt::Debug for CodecRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.codecs.keys()).finish()
    }
}
