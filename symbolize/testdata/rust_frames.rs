// rust_frames: a Rust function for the symbolizer's demangling test. It prints
// the address of ::widget::Widget::make as "sym make 0xADDR", then "ready",
// and waits for stdin to close.
use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};

// Keeps the box and its value alive (std::hint::black_box is not stable in
// Debian's rustc 1.63).
static SINK: AtomicUsize = AtomicUsize::new(0);

pub mod widget {
    pub struct Widget {
        pub v: u64,
    }

    impl Widget {
        #[inline(never)]
        pub fn make(v: u64) -> Box<Widget> { // LINE:rust_make
            Box::new(Widget { v })
        }
    }
}

fn main() {
    let w = widget::Widget::make(7);
    SINK.store(&*w as *const widget::Widget as usize, Ordering::SeqCst);
    let f: fn(u64) -> Box<widget::Widget> = widget::Widget::make;
    println!("sym make {:#x}", f as usize);
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut buf = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut buf);
    SINK.store(unsafe { std::ptr::read_volatile(&w.v) } as usize, Ordering::SeqCst);
}
