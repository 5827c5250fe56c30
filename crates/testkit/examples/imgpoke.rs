//! Pokes bytes into one block of a pool image, checksums fixed:
//! `imgpoke DEV BLOCK OFFSET HEXBYTES`.
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let mut img = ozfs_testkit::mutate::Image::open(std::path::Path::new(&a[1])).expect("open");
    let idx: usize = a[2].parse().expect("block");
    let off: usize = a[3].parse().expect("offset");
    let bytes: Vec<u8> = (0..a[4].len() / 2)
        .map(|i| u8::from_str_radix(&a[4][2 * i..2 * i + 2], 16).expect("hex"))
        .collect();
    img.mutate(idx, |d| d[off..off + bytes.len()].copy_from_slice(&bytes))
        .expect("mutate");
}
