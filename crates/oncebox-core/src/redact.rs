//! Secrets left out of connection URLs before they reach a log line, an error or `Debug`.
//!
//! Every backend that shows a URL (the RabbitMQ sender, the Redis cache, …) goes through
//! [`redact_url`], so the rule lives once.

/// Query parameters whose values are secrets when their lower-cased name contains one of these.
const SECRET_PARAMETER_MARKERS: [&str; 5] = ["pass", "secret", "token", "key", "auth"];

/// `url` with the password of its user info and the values of secret-looking query parameters
/// (`pass`, `password`, `token`, `secret`, `key`, `auth`, …) replaced by `***`.
///
/// It errs on the side of hiding: user info runs to the **last** `@` of the URL, so a password
/// holding an unencoded `/`, `?`, `#` or `@` is still hidden (a URL whose query holds an `@` loses
/// its host in the redacted form, which is the price of never showing a password).
///
/// ```
/// use oncebox_core::redact::redact_url;
/// assert_eq!(redact_url("amqp://app:pa/ss@mq:5672/%2f"), "amqp://app:***@mq:5672/%2f");
/// assert_eq!(redact_url("redis+unix:///run/redis.sock?db=1&pass=hunter2"), "redis+unix:///run/redis.sock?db=1&pass=***");
/// assert_eq!(redact_url("postgres://db:5432/app"), "postgres://db:5432/app");
/// ```
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(index) => url.split_at(index + 3),
        None => ("", url),
    };
    let (user_info, after_user_info) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at..]),
        None => (None, rest),
    };
    let mut redacted = String::with_capacity(url.len());
    redacted.push_str(scheme);
    if let Some(user_info) = user_info {
        match user_info.split_once(':') {
            Some((user, _password)) => {
                redacted.push_str(user);
                redacted.push_str(":***");
            }
            None => redacted.push_str(user_info),
        }
    }
    match after_user_info.split_once('?') {
        Some((location, query)) => {
            redacted.push_str(location);
            redacted.push('?');
            redacted.push_str(&redact_query(query));
        }
        None => redacted.push_str(after_user_info),
    }
    redacted
}

fn redact_query(query: &str) -> String {
    let (query, fragment) = match query.split_once('#') {
        Some((query, fragment)) => (query, Some(fragment)),
        None => (query, None),
    };
    let mut redacted = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _value)) if is_secret_parameter(name) => format!("{name}=***"),
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&");
    if let Some(fragment) = fragment {
        redacted.push('#');
        redacted.push_str(fragment);
    }
    redacted
}

fn is_secret_parameter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    SECRET_PARAMETER_MARKERS.iter().any(|marker| name.contains(marker))
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn the_password_of_the_user_info_is_hidden_whatever_it_holds() {
        for (url, shown) in [
            ("amqp://guest:s3cret@127.0.0.1:5672/%2f", "amqp://guest:***@127.0.0.1:5672/%2f"),
            ("amqp://app:pa/ss@mq:5672/%2f", "amqp://app:***@mq:5672/%2f"),
            ("amqps://app:a@b?c#d@mq:5671/prod", "amqps://app:***@mq:5671/prod"),
            ("redis://:s3cret@cache:6379/0", "redis://:***@cache:6379/0"),
            ("redis://user@cache:6379", "redis://user@cache:6379"),
            ("redis://cache:6379", "redis://cache:6379"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
        }
    }

    #[test]
    fn secret_query_parameters_are_hidden() {
        let shown =
            redact_url("redis+unix:///run/redis.sock?db=2&pass=s3cret&PassWord=s3cret&token=s3cret#x");
        assert_eq!(shown, "redis+unix:///run/redis.sock?db=2&pass=***&PassWord=***&token=***#x");
        let shown = redact_url("postgres://app@db/app?sslmode=require&password=s3cret");
        assert_eq!(shown, "postgres://app@db/app?sslmode=require&password=***");
        assert!(!redact_url("mysql://root:s3cret@db:3306/test?ssl-mode=REQUIRED").contains("s3cret"));
    }
}
