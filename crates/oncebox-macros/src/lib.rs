//! The `#[oncebox::publish]` attribute: the declarative way to publish an event from the function
//! that holds the business transaction.
//!
//! Use it through the facade (`oncebox::publish`), which is where it is tested and documented with
//! a compiled example. In short:
//!
//! ```ignore
//! #[oncebox::publish("order-created")] // publishes the Ok value
//! async fn place_order(
//!     outbox: &Publisher<SqliteWriter>,
//!     tx: &mut Transaction<'_, Sqlite>,
//!     order: NewOrder,
//! ) -> Result<Order, AppError> {
//!     // … business writes on &mut **tx …
//! }
//!
//! #[oncebox::publish("order-created", payload = order)] // publishes an argument
//! async fn record(outbox: &Publisher<SqliteWriter>, tx: &mut Transaction<'_, Sqlite>, order: &Order)
//!     -> Result<(), AppError> { … }
//! ```
//!
//! The function runs first. Only when it returns `Ok` is the event written, into the function's
//! own transaction and before the function returns; an `Err` is returned untouched and writes
//! nothing. Because the event is a row of that transaction, it is delivered if and only if the
//! caller commits.
//!
//! What the attribute needs from the function:
//! * it is an `async fn` returning a `Result` whose error converts from `oncebox::Error` (a failed
//!   publish is returned as that error);
//! * one parameter is the publisher: its type is `Publisher<…>` or `Oncebox<…>` (behind `&`,
//!   `Arc`, `Box` or `Rc`), or `publisher = <expression>` names it (`publisher = self.outbox`,
//!   `publisher = state.oncebox.publisher()`);
//! * one parameter borrows the transaction: its type is `&mut Transaction<…>` (or a shared
//!   `&Transaction<…>` for drivers whose transactions take `&self`), or `tx = <parameter>` names it.
//!   A transaction taken by value is refused: the event is written after the body, so the caller
//!   must still hold the transaction to commit it.
//!
//! With `payload = <parameter>`, that argument is published as it is after the body ran; the body
//! must therefore not move it (take it by reference or clone what the body consumes).
#![deny(missing_docs)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::{Expr, FnArg, Ident, ItemFn, LitStr, Pat, ReturnType, Token, Type};

/// Publishes an event of the given type inside the function's own transaction when the function
/// returns `Ok`: the `Ok` value by default, or the argument named by `payload = <parameter>`.
///
/// See the crate documentation for what the function must look like, and `oncebox::publish` for a
/// compiled example.
#[proc_macro_attribute]
pub fn publish(attribute: TokenStream, item: TokenStream) -> TokenStream {
    let arguments = syn::parse_macro_input!(attribute as Arguments);
    let function = syn::parse_macro_input!(item as ItemFn);
    expand(&arguments, function).unwrap_or_else(syn::Error::into_compile_error).into()
}

/// What the attribute was given.
struct Arguments {
    event_type: LitStr,
    payload: Option<Ident>,
    publisher: Option<Expr>,
    tx: Option<Ident>,
}

const USAGE: &str =
    "#[oncebox::publish(\"event-type\")] or #[oncebox::publish(\"event-type\", payload = <parameter>)]";

impl Parse for Arguments {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.is_empty() {
            return Err(syn::Error::new(
                Span::call_site(),
                format!("the event type is missing: write {USAGE}"),
            ));
        }
        let event_type: LitStr = input.parse().map_err(|error| {
            syn::Error::new(
                error.span(),
                "the first argument is the event type, a string literal such as \"order-created\"",
            )
        })?;
        if event_type.value().trim().is_empty() {
            return Err(syn::Error::new(event_type.span(), "the event type must not be blank"));
        }
        let mut arguments = Self { event_type, payload: None, publisher: None, tx: None };
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let key: Ident = input.parse()?;
            input.parse::<Token![=]>()?;
            let duplicate = || syn::Error::new(key.span(), format!("`{key}` is given twice"));
            match key.to_string().as_str() {
                "payload" if arguments.payload.is_some() => return Err(duplicate()),
                "payload" => arguments.payload = Some(input.parse()?),
                "publisher" if arguments.publisher.is_some() => return Err(duplicate()),
                "publisher" => arguments.publisher = Some(input.parse()?),
                "tx" if arguments.tx.is_some() => return Err(duplicate()),
                "tx" => arguments.tx = Some(input.parse()?),
                other => {
                    return Err(syn::Error::new(
                        key.span(),
                        format!(
                            "unknown argument `{other}`: #[oncebox::publish] takes the event type, then \
                             `payload = <parameter>`, `publisher = <expression>` or `tx = <parameter>`"
                        ),
                    ));
                }
            }
        }
        Ok(arguments)
    }
}

/// How a parameter holds its value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Holding {
    Owned,
    Shared,
    Exclusive,
}

/// A parameter bound to a plain name.
struct Parameter<'f> {
    name: &'f Ident,
    ty: &'f Type,
}

impl Parameter<'_> {
    fn holding(&self) -> Holding {
        match peel(self.ty) {
            Type::Reference(reference) if reference.mutability.is_some() => Holding::Exclusive,
            Type::Reference(_) => Holding::Shared,
            _ => Holding::Owned,
        }
    }

    /// `&*name` or `&mut *name` for a borrowed parameter, `&name` for an owned one.
    fn borrowed(&self) -> TokenStream2 {
        let name = self.name;
        match self.holding() {
            Holding::Exclusive => quote!(&mut *#name),
            Holding::Shared => quote!(&*#name),
            Holding::Owned => quote!(&#name),
        }
    }
}

/// The type without the parentheses and invisible groups macros wrap around it.
fn peel(ty: &Type) -> &Type {
    match ty {
        Type::Paren(inner) => peel(&inner.elem),
        Type::Group(inner) => peel(&inner.elem),
        other => other,
    }
}

/// The last path segment's name of `ty`, looking through references and, when `through_pointers`,
/// through `Arc`, `Box` and `Rc`.
fn type_name(ty: &Type, through_pointers: bool) -> Option<String> {
    match peel(ty) {
        Type::Reference(reference) => type_name(&reference.elem, through_pointers),
        Type::Path(path) => {
            let segment = path.path.segments.last()?;
            let name = segment.ident.to_string();
            if through_pointers
                && matches!(name.as_str(), "Arc" | "Box" | "Rc")
                && let syn::PathArguments::AngleBracketed(arguments) = &segment.arguments
                && let Some(syn::GenericArgument::Type(inner)) = arguments.args.first()
            {
                return type_name(inner, true);
            }
            Some(name)
        }
        _ => None,
    }
}

/// The spans of a `Result`'s value and error types (`Result<T, E>`, `io::Result<T>`), so errors about
/// the payload point at `T` and errors about the conversion at `E`; the whole type where absent.
fn result_spans(ty: &Type) -> (Span, Span) {
    let whole = ty.span();
    let Type::Path(path) = peel(ty) else { return (whole, whole) };
    let Some(syn::PathSegment { arguments: syn::PathArguments::AngleBracketed(arguments), .. }) =
        path.path.segments.last()
    else {
        return (whole, whole);
    };
    let mut types = arguments.args.iter().filter_map(|argument| match argument {
        syn::GenericArgument::Type(ty) => Some(ty.span()),
        _ => None,
    });
    let value = types.next().unwrap_or(whole);
    (value, types.next().unwrap_or(whole))
}

fn parameters(function: &ItemFn) -> Vec<Parameter<'_>> {
    function
        .sig
        .inputs
        .iter()
        .filter_map(|input| match input {
            FnArg::Typed(typed) => match &*typed.pat {
                Pat::Ident(pattern) => Some(Parameter { name: &pattern.ident, ty: &typed.ty }),
                _ => None,
            },
            FnArg::Receiver(_) => None,
        })
        .collect()
}

fn named<'p, 'f>(
    parameters: &'p [Parameter<'f>],
    name: &Ident,
    role: &str,
) -> syn::Result<&'p Parameter<'f>> {
    parameters.iter().find(|parameter| parameter.name == name).ok_or_else(|| {
        syn::Error::new(
            name.span(),
            format!("no parameter named `{name}`: `{role}` names one of the function's parameters"),
        )
    })
}

/// The one parameter whose type is named one of `names`, or an error saying how to name it.
fn found_by_type<'p, 'f>(
    parameters: &'p [Parameter<'f>],
    names: &[&str],
    through_pointers: bool,
    signature: Span,
    missing: &str,
    key: &str,
) -> syn::Result<&'p Parameter<'f>> {
    let candidates: Vec<&Parameter<'_>> = parameters
        .iter()
        .filter(|parameter| {
            type_name(parameter.ty, through_pointers).is_some_and(|name| names.contains(&name.as_str()))
        })
        .collect();
    match candidates.as_slice() {
        [one] => Ok(one),
        [] => Err(syn::Error::new(signature, missing)),
        many => {
            let listed: Vec<String> = many.iter().map(|parameter| format!("`{}`", parameter.name)).collect();
            Err(syn::Error::new(
                signature,
                format!(
                    "more than one parameter could be meant ({}): name one with `{key} = <parameter>`",
                    listed.join(", ")
                ),
            ))
        }
    }
}

fn expand(arguments: &Arguments, function: ItemFn) -> syn::Result<TokenStream2> {
    let signature = function.sig.span();
    if function.sig.asyncness.is_none() {
        return Err(syn::Error::new(
            function.sig.fn_token.span,
            "#[oncebox::publish] goes on an `async fn`: writing the event awaits the database",
        ));
    }
    let returned = match &function.sig.output {
        ReturnType::Type(_, ty) if type_name(ty, false).is_some_and(|name| name.ends_with("Result")) => {
            ty.clone()
        }
        other => {
            return Err(syn::Error::new(
                other.span(),
                "#[oncebox::publish] needs a function that returns a `Result`: the event is written \
                 only for `Ok`, and an `Err` is returned untouched",
            ));
        }
    };
    let parameters = parameters(&function);

    let tx = match &arguments.tx {
        Some(name) => named(&parameters, name, "tx")?,
        None => found_by_type(
            &parameters,
            &["Transaction"],
            false,
            signature,
            "no transaction parameter: take the transaction as `tx: &mut Transaction<…>`, or name the \
             parameter that holds it with `tx = <parameter>`",
            "tx",
        )?,
    };
    if tx.holding() == Holding::Owned {
        return Err(syn::Error::new(
            tx.ty.span(),
            format!(
                "the transaction `{}` is taken by value: the event is written into it after the body \
                 returns, so borrow it (`&mut Transaction<…>`) and let the caller commit",
                tx.name
            ),
        ));
    }
    let tx = tx.borrowed();

    let publisher = match &arguments.publisher {
        Some(expression) => quote!((#expression)),
        None => {
            let found = found_by_type(
                &parameters,
                &["Publisher", "Oncebox"],
                true,
                signature,
                "no publisher parameter: take `&Publisher<…>` or `&Oncebox<…>`, or name it with \
                 `publisher = <expression>` (e.g. `publisher = self.outbox`)",
                "publisher",
            )?;
            let name = found.name;
            if type_name(found.ty, true).is_some_and(|name| name == "Oncebox") {
                quote!(#name.publisher())
            } else {
                quote!(#name)
            }
        }
    };

    let (payload, payload_span) = match &arguments.payload {
        Some(name) => {
            let parameter = named(&parameters, name, "payload")?;
            match parameter.holding() {
                Holding::Owned => (quote!(&#name), name.span()),
                Holding::Shared | Holding::Exclusive => (quote!(&*#name), name.span()),
            }
        }
        None => (quote!(&__oncebox_value), result_spans(&returned).0),
    };
    let error_span = result_spans(&returned).1;

    let event_type = &arguments.event_type;
    let ItemFn { attrs, vis, sig, block } = function;
    // A payload the serializer cannot take is reported at the payload; an error type without
    // `From<oncebox::Error>` at the error type.
    let written = quote_spanned! {payload_span=> #publisher.publish(#tx, #event_type, #payload) };
    let publish = quote_spanned! {error_span=> #written.await? };
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            // The body runs in its own async block so that `return` and `?` inside it end the body,
            // not the function: the event is written only after an `Ok`.
            let __oncebox_outcome = async { ::core::convert::identity::<#returned>(#block) }.await;
            match __oncebox_outcome {
                ::core::result::Result::Ok(__oncebox_value) => {
                    #publish;
                    ::core::result::Result::Ok(__oncebox_value)
                }
                ::core::result::Result::Err(__oncebox_error) => ::core::result::Result::Err(__oncebox_error),
            }
        }
    })
}
