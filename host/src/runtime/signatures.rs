//! The functions a component exports, type-checked against its kind's WIT world before the
//! host links it, so a module with the right export name but a missing function or a wrong
//! signature is refused naming the function and the type the world expects — not, at its
//! first instantiation, with wasmtime's "failed to convert function to given type".
//!
//! The expected types come from the very WIT the host's bindings are generated from: a
//! reference component implementing the world (wit-component's dummy module, every function a
//! trap) is compiled once per kind, and each of its exported functions is compared with the
//! candidate's of the same name, structurally (wasmtime's component types compare by shape).

use std::sync::{Mutex, OnceLock};

use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::{ComponentFunc, ComponentItem, Type};
use wit_parser::{Resolve, TypeDefKind, WorldId};

use super::{Kind, Version};

/// The shared `modnode:types` package every world uses.
const TYPES_WIT: &str = include_str!("../../../wit/types/types.wit");

/// The WIT package of `kind`'s contract `contract` and its world's name.
fn wit_of(kind: Kind, contract: Version) -> Result<(&'static str, &'static str), String> {
    let wit = kind
        .contracts()
        .iter()
        .find(|c| c.version == contract)
        .map(|c| c.wit)
        .ok_or_else(|| format!("this host does not implement {kind}@{contract}"))?;
    let world = kind
        .spec()
        .world
        .rsplit_once('/')
        .map_or(kind.package(), |(_, w)| w);
    Ok((wit, world))
}

/// Why a component's exports do not match its world.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// The exported interface lacks a function of the world.
    #[error(
        "export `{interface}` has no function `{function}`; the {kind}@{contract} world \
         expects `{function}: {expected}`"
    )]
    Missing {
        /// The module's kind.
        kind: Kind,
        /// The contract the module declares (the world checked against).
        contract: Version,
        /// The exported interface.
        interface: String,
        /// The function.
        function: String,
        /// Its signature in the world, in WIT.
        expected: String,
    },
    /// A function of the world has another type in the component.
    #[error(
        "function `{function}` of export `{interface}` has the wrong type: the \
         {kind}@{contract} world expects `{function}: {expected}`, the module exports `{found}`"
    )]
    WrongType {
        /// The module's kind.
        kind: Kind,
        /// The contract the module declares (the world checked against).
        contract: Version,
        /// The exported interface.
        interface: String,
        /// The function.
        function: String,
        /// Its signature in the world, in WIT.
        expected: String,
        /// What the module exports under that name.
        found: String,
    },
    /// The world's interface itself is not exported as an instance (static validation checks
    /// the name; this is its shape).
    #[error("export `{interface}` is not an instance of functions, as the {kind} world expects")]
    NotAnInstance {
        /// The module's kind.
        kind: Kind,
        /// The export.
        interface: String,
    },
    /// The reference of the world could not be built (the host's fault: its WIT).
    #[error("cannot build the reference of the {kind} world from its WIT: {message}")]
    Reference {
        /// The kind.
        kind: Kind,
        /// What failed.
        message: String,
    },
}

/// One function the world expects.
struct Expected {
    name: String,
    /// Its signature in WIT, for messages.
    wit: String,
    ty: ComponentFunc,
}

/// What a kind's world exports: its interface's name without version, and its functions.
struct Reference {
    interface: String,
    functions: Vec<Expected>,
}

/// Every (kind, contract) reference built so far; built once each, kept for the process.
type References = Mutex<Vec<((Kind, Version), &'static Reference)>>;

fn reference(
    kind: Kind,
    contract: Version,
    engine: &Engine,
) -> Result<&'static Reference, SignatureError> {
    static REFERENCES: OnceLock<References> = OnceLock::new();
    let references = REFERENCES.get_or_init(|| Mutex::new(Vec::new()));
    let mut built = references.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, r)) = built.iter().find(|(key, _)| *key == (kind, contract)) {
        return Ok(r);
    }
    // One per contract the host implements: a bounded, intentional leak.
    let r: &'static Reference = Box::leak(Box::new(build_reference(kind, contract, engine)?));
    built.push(((kind, contract), r));
    Ok(r)
}

fn build_reference(
    kind: Kind,
    contract: Version,
    engine: &Engine,
) -> Result<Reference, SignatureError> {
    let failed = |message: String| SignatureError::Reference { kind, message };
    let (resolve, world) = world_of(kind, contract).map_err(failed)?;
    let component = dummy_component(&resolve, world).map_err(failed)?;
    let component = Component::new(engine, &component).map_err(|e| failed(format!("{e:#}")))?;
    // The world exports one interface (static validation found the kind by it).
    let mut wit_functions = Vec::new();
    let mut interface = None;
    let exports = resolve
        .worlds
        .get(world)
        .map(|w| &w.exports)
        .ok_or_else(|| failed("the world is not in its own WIT".into()))?;
    for (key, item) in exports {
        if let wit_parser::WorldItem::Interface { id, .. } = item {
            let name = resolve.name_world_key(key);
            interface = Some(unversioned(&name).to_string());
            let Some(exported) = resolve.interfaces.get(*id) else {
                continue;
            };
            for (fname, func) in &exported.functions {
                wit_functions.push((fname.clone(), signature(&resolve, func)));
            }
        }
    }
    let interface = interface.ok_or_else(|| failed("the world exports no interface".into()))?;
    let ty = component.component_type();
    let instance = ty
        .exports(engine)
        .find_map(|(name, item)| match item.ty {
            ComponentItem::ComponentInstance(i) if unversioned(name) == interface => Some(i),
            _ => None,
        })
        .ok_or_else(|| failed(format!("the reference does not export {interface}")))?;
    let mut functions = Vec::new();
    for (name, wit) in wit_functions {
        match instance.get_export(engine, &name).map(|e| e.ty) {
            Some(ComponentItem::ComponentFunc(ty)) => functions.push(Expected { name, wit, ty }),
            _ => return Err(failed(format!("the reference lacks function {name}"))),
        }
    }
    Ok(Reference {
        interface,
        functions,
    })
}

/// The world of `kind`'s contract `contract`, parsed from the WIT the host's bindings are
/// generated from.
fn world_of(kind: Kind, contract: Version) -> Result<(Resolve, WorldId), String> {
    let (wit, world_name) = wit_of(kind, contract)?;
    let mut resolve = Resolve::new();
    resolve
        .push_str("types.wit", TYPES_WIT)
        .map_err(|e| format!("{e:#}"))?;
    let package = resolve
        .push_str(format!("{world_name}.wit"), wit)
        .map_err(|e| format!("{e:#}"))?;
    let world = resolve
        .select_world(&[package], Some(world_name))
        .map_err(|e| format!("{e:#}"))?;
    Ok((resolve, world))
}

/// A component implementing `world` whose every function traps.
fn dummy_component(resolve: &Resolve, world: WorldId) -> Result<Vec<u8>, String> {
    let mut module =
        wit_component::dummy_module(resolve, world, wit_parser::ManglingAndAbi::Standard32);
    wit_component::embed_component_metadata(
        &mut module,
        resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .map_err(|e| format!("{e:#}"))?;
    wit_component::ComponentEncoder::default()
        .module(&module)
        .map_err(|e| format!("{e:#}"))?
        .validate(true)
        .encode()
        .map_err(|e| format!("{e:#}"))
}

fn unversioned(name: &str) -> &str {
    name.split_once('@').map_or(name, |(path, _)| path)
}

/// Checks that `component`, statically validated as a module of `kind` for (host) contract
/// `contract`, exports every function of that contract's world with the world's type.
pub fn check_exports(
    kind: Kind,
    contract: Version,
    engine: &Engine,
    component: &Component,
) -> Result<(), SignatureError> {
    let reference = reference(kind, contract, engine)?;
    let ty = component.component_type();
    let Some((interface, item)) = ty
        .exports(engine)
        .find(|(name, _)| unversioned(name) == reference.interface)
    else {
        // Static validation requires the export; nothing to compare without it.
        return Err(SignatureError::NotAnInstance {
            kind,
            interface: reference.interface.clone(),
        });
    };
    let ComponentItem::ComponentInstance(instance) = item.ty else {
        return Err(SignatureError::NotAnInstance {
            kind,
            interface: interface.to_string(),
        });
    };
    for expected in &reference.functions {
        let found = match instance.get_export(engine, &expected.name).map(|e| e.ty) {
            Some(ComponentItem::ComponentFunc(found)) => found,
            Some(other) => {
                return Err(SignatureError::WrongType {
                    kind,
                    contract,
                    interface: interface.to_string(),
                    function: expected.name.clone(),
                    expected: expected.wit.clone(),
                    found: item_kind(&other).to_string(),
                });
            }
            None => {
                return Err(SignatureError::Missing {
                    kind,
                    contract,
                    interface: interface.to_string(),
                    function: expected.name.clone(),
                    expected: expected.wit.clone(),
                });
            }
        };
        let same = found.async_() == expected.ty.async_()
            && found
                .params()
                .map(|(_, t)| t)
                .eq(expected.ty.params().map(|(_, t)| t))
            && found.results().eq(expected.ty.results());
        if !same {
            return Err(SignatureError::WrongType {
                kind,
                contract,
                interface: interface.to_string(),
                function: expected.name.clone(),
                expected: expected.wit.clone(),
                found: render_func(&found),
            });
        }
    }
    Ok(())
}

fn item_kind(item: &ComponentItem) -> &'static str {
    match item {
        ComponentItem::ComponentFunc(_) => "a function",
        ComponentItem::CoreFunc(_) => "a core function",
        ComponentItem::Module(_) => "a core module",
        ComponentItem::Component(_) => "a component",
        ComponentItem::ComponentInstance(_) => "an instance",
        ComponentItem::Type(_) => "a type",
        ComponentItem::Resource(_) => "a resource",
    }
}

/// `func(name: type, ...) -> type` in WIT, from the world.
fn signature(resolve: &Resolve, func: &wit_parser::Function) -> String {
    let params: Vec<String> = func
        .params
        .iter()
        .map(|p| format!("{}: {}", p.name, wit_type(resolve, &p.ty)))
        .collect();
    match &func.result {
        Some(result) => format!(
            "func({}) -> {}",
            params.join(", "),
            wit_type(resolve, result)
        ),
        None => format!("func({})", params.join(", ")),
    }
}

fn wit_type(resolve: &Resolve, ty: &wit_parser::Type) -> String {
    use wit_parser::Type as W;
    match ty {
        W::Bool => "bool".into(),
        W::U8 => "u8".into(),
        W::U16 => "u16".into(),
        W::U32 => "u32".into(),
        W::U64 => "u64".into(),
        W::S8 => "s8".into(),
        W::S16 => "s16".into(),
        W::S32 => "s32".into(),
        W::S64 => "s64".into(),
        W::F32 => "f32".into(),
        W::F64 => "f64".into(),
        W::Char => "char".into(),
        W::String => "string".into(),
        W::ErrorContext => "error-context".into(),
        W::Id(id) => {
            let Some(def) = resolve.types.get(*id) else {
                return "?".into();
            };
            if let Some(name) = &def.name {
                return name.clone();
            }
            let t = |ty: &wit_parser::Type| wit_type(resolve, ty);
            let opt = |ty: &Option<wit_parser::Type>| ty.as_ref().map_or("_".into(), t);
            match &def.kind {
                TypeDefKind::List(ty) => format!("list<{}>", t(ty)),
                TypeDefKind::Option(ty) => format!("option<{}>", t(ty)),
                TypeDefKind::Result(r) => format!("result<{}, {}>", opt(&r.ok), opt(&r.err)),
                TypeDefKind::Tuple(tuple) => format!(
                    "tuple<{}>",
                    tuple.types.iter().map(t).collect::<Vec<_>>().join(", ")
                ),
                TypeDefKind::Type(ty) => t(ty),
                other => other.as_str().to_string(),
            }
        }
    }
}

/// A wasmtime function type in WIT-like text (the candidate's names are not kept).
fn render_func(func: &ComponentFunc) -> String {
    let params: Vec<String> = func
        .params()
        .map(|(name, ty)| format!("{name}: {}", render(&ty)))
        .collect();
    let results: Vec<String> = func.results().map(|ty| render(&ty)).collect();
    match results.as_slice() {
        [] => format!("func({})", params.join(", ")),
        [one] => format!("func({}) -> {one}", params.join(", ")),
        many => format!("func({}) -> ({})", params.join(", "), many.join(", ")),
    }
}

fn render(ty: &Type) -> String {
    match ty {
        Type::Bool => "bool".into(),
        Type::U8 => "u8".into(),
        Type::U16 => "u16".into(),
        Type::U32 => "u32".into(),
        Type::U64 => "u64".into(),
        Type::S8 => "s8".into(),
        Type::S16 => "s16".into(),
        Type::S32 => "s32".into(),
        Type::S64 => "s64".into(),
        Type::Float32 => "f32".into(),
        Type::Float64 => "f64".into(),
        Type::Char => "char".into(),
        Type::String => "string".into(),
        Type::List(l) => format!("list<{}>", render(&l.ty())),
        Type::Option(o) => format!("option<{}>", render(&o.ty())),
        Type::Result(r) => format!(
            "result<{}, {}>",
            r.ok().map_or("_".into(), |t| render(&t)),
            r.err().map_or("_".into(), |t| render(&t))
        ),
        Type::Tuple(t) => format!(
            "tuple<{}>",
            t.types().map(|t| render(&t)).collect::<Vec<_>>().join(", ")
        ),
        Type::Record(r) => format!(
            "record {{ {} }}",
            r.fields()
                .map(|f| format!("{}: {}", f.name, render(&f.ty)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Type::Variant(_) => "variant".into(),
        Type::Enum(e) => format!("enum {{ {} }}", e.names().collect::<Vec<_>>().join(", ")),
        Type::Flags(_) => "flags".into(),
        _ => format!("{ty:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::engine::engine;

    /// The interface the kind's world exports, in `resolve`.
    fn exported(resolve: &Resolve, world: WorldId) -> wit_parser::InterfaceId {
        resolve.worlds[world]
            .exports
            .values()
            .find_map(|item| match item {
                wit_parser::WorldItem::Interface { id, .. } => Some(*id),
                _ => None,
            })
            .unwrap()
    }

    /// A component of `kind`'s world (right names, right package and version) after `edit`
    /// changed its exported interface's functions.
    fn edited(
        kind: Kind,
        contract: Version,
        edit: impl FnOnce(&mut wit_parser::Interface) -> String,
    ) -> (Vec<u8>, String) {
        let (mut resolve, world) = world_of(kind, contract).unwrap();
        let id = exported(&resolve, world);
        let function = edit(&mut resolve.interfaces[id]);
        (dummy_component(&resolve, world).unwrap(), function)
    }

    /// Every contract of every kind.
    fn every_contract() -> Vec<(Kind, Version)> {
        Kind::ALL
            .into_iter()
            .flat_map(|k| k.contracts().iter().map(move |c| (k, c.version)))
            .collect()
    }

    /// Removes the interface's last function; returns its name.
    fn remove_last(interface: &mut wit_parser::Interface) -> String {
        interface.functions.pop().unwrap().0
    }

    /// Changes the interface's last function's type (a parameter less, or another result);
    /// returns its name.
    fn retype_last(interface: &mut wit_parser::Interface) -> String {
        let (name, func) = interface.functions.last_mut().unwrap();
        if func.params.pop().is_none() {
            func.result = Some(wit_parser::Type::U8);
        }
        name.clone()
    }

    #[test]
    fn every_embedded_module_matches_its_world() {
        for (name, bytes) in crate::artifacts::EMBEDDED {
            let info = crate::runtime::inspect::validate(bytes).unwrap();
            let component = Component::new(engine(), bytes).unwrap();
            let contract = info.host_contract().unwrap().version;
            check_exports(info.kind, contract, engine(), &component)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        }
    }

    #[test]
    fn a_missing_function_is_named_with_its_expected_type_for_every_kind() {
        for (kind, contract) in every_contract() {
            let (bytes, function) = edited(kind, contract, remove_last);
            let component = Component::new(engine(), &bytes).unwrap();
            let err = check_exports(kind, contract, engine(), &component).unwrap_err();
            assert!(
                matches!(&err, SignatureError::Missing { function: f, .. } if *f == function),
                "{kind}: {err}"
            );
            // The world of the module's own contract is named.
            assert!(
                err.to_string()
                    .contains(&format!("the {kind}@{contract} world")),
                "{err}"
            );
            assert!(
                err.to_string().contains(&format!("`{function}: func(")),
                "{err}"
            );
        }
    }

    #[test]
    fn a_wrong_signature_is_named_with_its_expected_type_for_every_kind() {
        for (kind, contract) in every_contract() {
            let (bytes, function) = edited(kind, contract, retype_last);
            let component = Component::new(engine(), &bytes).unwrap();
            let err = check_exports(kind, contract, engine(), &component).unwrap_err();
            assert!(
                matches!(&err, SignatureError::WrongType { function: f, .. } if *f == function),
                "{kind}: {err}"
            );
            assert!(
                err.to_string().contains(&format!("`{function}: func(")),
                "{err}"
            );
        }
    }

    #[test]
    fn loading_a_wrong_plan_names_the_function_not_a_trap() {
        // `plan` with one parameter fewer: before the check, the first instantiation failed
        // with "failed to convert function to given type", naming no function.
        let (bytes, function) = edited(
            Kind::GossipPolicy,
            Kind::GossipPolicy.contracts()[0].version,
            |interface| {
                let plan = interface.functions.get_mut("plan").unwrap();
                plan.params.pop().unwrap();
                "plan".into()
            },
        );
        let runtime =
            crate::runtime::Runtime::new(crate::runtime::RuntimeConfig::default()).unwrap();
        let err = match runtime.load(&bytes) {
            Ok(_) => panic!("a module with a wrong `plan` loaded"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains(&format!("`{function}: func(")), "{err}");
        assert!(err.contains("send-plan"), "{err}");
        assert!(!err.contains("trapped"), "{err}");
    }
}
